import { assertEquals } from "deno-std/assert/mod.js";
import { IpPlumber } from "../../../daemon/net/ip_plumber.ts";
import {
  type IpBatchOptions,
  IpCommandError,
  type IpRunner,
} from "../../../daemon/net/ip_runner.ts";

/** Answers each batch from a table keyed by its first line; records what ran. */
class ScriptedRunner implements IpRunner {
  ran: { lines: string[]; options: IpBatchOptions }[] = [];
  constructor(readonly answers: Record<string, string | Error>) {}
  batch(lines: string[], options: IpBatchOptions = {}): Promise<string> {
    this.ran.push({ lines, options });
    const answer = this.answers[lines[0]] ?? "";
    return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
  }
}

Deno.test("the default-route interface is the device of the first IPv4 default route", async () => {
  const runner = new ScriptedRunner({
    "route show default": JSON.stringify([{
      dst: "default",
      gateway: "192.0.2.1",
      dev: "uplink0",
    }]),
  });
  assertEquals(await new IpPlumber(runner).defaultRouteInterface(), "uplink0");
  assertEquals(await new IpPlumber(new ScriptedRunner({})).defaultRouteInterface(), undefined);
});

Deno.test("bridge ports are listed by name, and a missing bridge has none", async () => {
  const runner = new ScriptedRunner({
    "link show master ferry0": JSON.stringify([{ ifname: "fyaaaa" }, { ifname: "fybbbb" }]),
  });
  assertEquals(await new IpPlumber(runner).bridgePorts("ferry0"), ["fyaaaa", "fybbbb"]);
  const missing = new ScriptedRunner({
    "link show master gone0": new IpCommandError("ip", 'Device "gone0" does not exist.'),
  });
  assertEquals(await new IpPlumber(missing).bridgePorts("gone0"), []);
});

Deno.test("an existing bridge is configured, not created again, and its sysctls go with the batch (bridge-nf-call-iptables where br_netfilter is loaded)", async () => {
  const runner = new ScriptedRunner({});
  await new IpPlumber(runner, { forwarding: true }).ensureBridge({
    name: "ferry0",
    mtu: 1500,
    gateways: ["10.244.0.1/24"],
  });
  assertEquals(runner.ran.map((r) => r.lines[0]), [
    "link show dev ferry0",
    "link set ferry0 mtu 1500 up",
  ]);
  const brNetfilter = await Deno.stat("/proc/sys/net/bridge/bridge-nf-call-iptables")
    .then(() => true, () => false);
  assertEquals(runner.ran[1].options.sysctls, [
    ["net/ipv4/ip_forward", "1"],
    ...(brNetfilter ? [["net/bridge/bridge-nf-call-iptables", "1"]] : []),
  ]);
});

const SUBLINK = {
  kind: "macvlan" as const,
  netns: "/var/run/netns/p",
  ifname: "eth0",
  master: "m0",
  mode: "bridge",
  addresses: [{ cidr: "192.0.2.5/24" }],
  routes: [],
};

Deno.test("a sublink the kernel refused to create is not removed: the name may be another interface's", async () => {
  const runner = new ScriptedRunner({
    [`link add link m0 name eth0 netns /var/run/netns/p type macvlan mode bridge`]:
      new IpCommandError("ip", "RTNETLINK answers: File exists"),
  });
  const err = await new IpPlumber(runner).plugSublink(SUBLINK).catch((e) => e);
  assertEquals(err.code, 5);
  assertEquals(runner.ran.map((r) => r.lines[0]).some((l) => l.startsWith("link del")), false);
});

Deno.test("a sublink created and then failing to configure is removed again", async () => {
  const runner = new ScriptedRunner({
    "link set lo up": new IpCommandError("ip", "RTNETLINK answers: Invalid argument"),
  });
  const stat = Deno.stat;
  // unplugIn looks for the namespace first; this one exists only in the script.
  Object.defineProperty(Deno, "stat", { value: () => Promise.resolve({}), configurable: true });
  try {
    const err = await new IpPlumber(runner).plugSublink(SUBLINK).catch((e) => e);
    assertEquals(err.code, 5);
  } finally {
    Object.defineProperty(Deno, "stat", { value: stat, configurable: true });
  }
  assertEquals(runner.ran.at(-1)?.lines, ["link del eth0"]);
  assertEquals(runner.ran.at(-1)?.options.netns, "/var/run/netns/p");
});
