// The iproute2 runner: a batch into a namespace that is gone fails as an `ip` failure carrying
// nsenter's words (what the plumber's forgiving DEL looks for), whatever the batch's size.
import { assertMatch, assertRejects } from "deno-std/assert/mod.js";
import { IpCommandError, SpawningIpRunner } from "../../../daemon/net/ip_runner.ts";

const HAVE_IP = await Deno.stat("/usr/bin/nsenter").then(() => true, () => false);

Deno.test({
  name: "a batch into a namespace that is gone fails with nsenter's message, not a broken pipe",
  ignore: !HAVE_IP,
  fn: async () => {
    // More lines than a pipe holds: nsenter exits before reading them.
    const lines = Array.from({ length: 40_000 }, (_, i) => `link set dev x${i} up`);
    const err = await assertRejects(
      () => new SpawningIpRunner().batch(lines, { netns: "/run/netns/ferry-gone-for-good" }),
      IpCommandError,
    );
    assertMatch(err.stderr, /No such file or directory/);
  },
});
