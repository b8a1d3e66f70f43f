import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { SublinkDriver } from "../../../daemon/drivers/sublink.ts";
import { resolveConfig } from "../../../daemon/config/config.ts";
import { Libc } from "../../../daemon/net/netlink/libc.ts";
import { podGuardSide } from "../../../daemon/wiring/portsec_side.ts";
import { IS_ROOT, run, uniqueToken, withNetns } from "../../../daemon/dev/netns.ts";
import type { Plumber, SublinkSpec } from "../../../daemon/net/plumber.ts";
import { stableMac } from "../../../daemon/net/naming.ts";
import { CniError } from "../../../lib/cni/errors.ts";

/** Records what the driver asks of the kernel; fails the plug when told to. */
class FakePlumber implements Plumber {
  plugged: SublinkSpec[] = [];
  unplugged: string[] = [];
  constructor(
    readonly defaultDev: string | undefined,
    readonly failPlug = false,
    readonly taken: string[] = [],
  ) {}
  ensureBridge = () => Promise.resolve();
  plugVeth = () => Promise.resolve();
  unplugVeth = () => Promise.resolve();
  securePort = () => Promise.resolve();
  plugSublink(spec: SublinkSpec) {
    this.plugged.push(spec);
    return this.failPlug ? Promise.reject(new CniError(5, "plug failed")) : Promise.resolve();
  }
  unplugIn(netns: string, ifname: string) {
    this.unplugged.push(`${netns}/${ifname}`);
    return Promise.resolve();
  }
  inspect = (netns: string, ifname: string) =>
    Promise.resolve(
      this.taken.includes(`${netns}/${ifname}`)
        ? { name: ifname, mac: "", mtu: 1500, up: true, addresses: [], routes: [] }
        : null,
    );
  defaultRouteInterface = () => Promise.resolve(this.defaultDev);
  bridgePorts = () => Promise.resolve([]);
  removeBridgeAddress = () => Promise.resolve();
}

const ctx = (attachment: Record<string, unknown>) => ({
  key: { containerId: "c1", ifname: "net1" },
  netns: "/var/run/netns/p",
  conf: { cniVersion: "1.0.0", name: "lan", ...attachment } as never,
  args: {},
  path: [],
});
const deadline = 1000;

Deno.test("a macvlan without a master sits on the host's default-route interface, with a stable MAC", async () => {
  const plumber = new FakePlumber("uplink0");
  const plugged = await new SublinkDriver("macvlan", plumber, deadline).add(
    ctx({ type: "macvlan" }),
  );
  assertEquals(plumber.plugged[0].master, "uplink0");
  assertEquals(plumber.plugged[0].mode, "bridge");
  assertEquals(plugged.result.interfaces, [{
    name: "net1",
    mac: stableMac("c1", "net1", "container"),
    sandbox: "/var/run/netns/p",
  }]);
});

Deno.test("without a master and without a default route the config is refused with code 7", async () => {
  const err = await assertRejects(
    () =>
      new SublinkDriver("ipvlan", new FakePlumber(undefined), deadline).add(
        ctx({ type: "ipvlan" }),
      ),
    CniError,
  );
  assertEquals(err.code, 7);
});

Deno.test("a failed plug keeps the error and removes nothing by name (the plumber undoes only its own link)", async () => {
  const plumber = new FakePlumber("uplink0", true);
  const err = await assertRejects(
    () =>
      new SublinkDriver("macvlan", plumber, deadline).add(ctx({ type: "macvlan", master: "m0" })),
    CniError,
  );
  assertEquals([err.code, err.message], [5, "plug failed"]);
  assertEquals(plumber.unplugged, []);
});

Deno.test("an interface name already taken in the pod is refused before anything is created", async () => {
  const plumber = new FakePlumber("uplink0", false, ["/var/run/netns/p/net1"]);
  const err = await assertRejects(
    () =>
      new SublinkDriver("macvlan", plumber, deadline).add(ctx({ type: "macvlan", master: "m0" })),
    CniError,
  );
  assertEquals(err.code, 5);
  assertEquals(err.message, "interface net1 already exists in /var/run/netns/p");
  assertEquals([plumber.plugged, plumber.unplugged], [[], []]);
});

Deno.test("ipvlan defaults to l2 mode and reports its master's MAC, never one of its own", async () => {
  const plumber = new FakePlumber("lo");
  const plugged = await new SublinkDriver("ipvlan", plumber, deadline).add(ctx({ type: "ipvlan" }));
  assertEquals([plumber.plugged[0].mode, plumber.plugged[0].mac], ["l2", undefined]);
  assertEquals(plugged.result.interfaces?.[0].mac, "00:00:00:00:00:00");
});

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

Deno.test({
  name:
    "under port security an interface name the guard's script cannot carry (net#1, a;b, x{}) is refused with code 7 before anything is created; letters, digits, '.', '-' and '_' are guarded",
  ignore: !IS_ROOT || !hasNft,
  // The in-process writer closes its socket on a worker thread after the write.
  sanitizeOps: false,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const config = resolveConfig({ portSecurity: { table: `fps${uniqueToken()}` } });
      const guard = podGuardSide({
        config,
        libc: Libc.open(),
        logger: getLogger(["ferry", "portsec"]),
      });
      const add = (plumber: FakePlumber, ifname: string) =>
        new SublinkDriver("macvlan", plumber, deadline, guard).add({
          ...ctx({ type: "macvlan", master: "m0" }),
          key: { containerId: "c1", ifname },
          netns: ns.path,
        });
      // Names Linux and the network selection annotation take; in the script, `#` comments out
      // the rest of the table's name and its `{`, `;` ends the command, braces open a block.
      for (const ifname of ["net#1", "a;b", "x{}", "q\\1", "d$x"]) {
        const plumber = new FakePlumber("uplink0");
        const err = await assertRejects(() => add(plumber, ifname), CniError);
        assertEquals(err.code, 7, `${ifname}: ${err.message} ${err.details}`);
        assert(err.message.includes("cannot be guarded by port security"), err.message);
        assertEquals([plumber.plugged, plumber.unplugged], [[], []], ifname);
      }
      const plumber = new FakePlumber("uplink0");
      await add(plumber, "N.1-a_b");
      const listed = await run("ip", "netns", "exec", ns.name, "nft", "list", "tables");
      assertEquals(listed.trim(), `table netdev ${config.portSecurity.table}-N.1-a_b`);
      assertEquals(plumber.plugged.length, 1);
    }),
});
