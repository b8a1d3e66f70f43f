// Secondary interface drivers through the installed shim: a Ferry config with an `attachment`
// plugs macvlan and ipvlan natively (addresses from the attachment's IPAM plugin, Debian's
// host-local) and delegates any other type to the reference plugin of that name. Needs root;
// masters are host-only veth ends made per test, so no traffic leaves the machine; everything is removed
// also when a test fails.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import { cniEnv, netconf, type TestFerry, withFerry } from "../../daemon/dev/harness.ts";
import {
  hostLinkExists,
  ipIn,
  IS_ROOT,
  kernelSupports,
  linkInNetns,
  pingOnce,
  run,
  type TestNetns,
  uniqueToken,
  withMasterLink,
  withNetns,
} from "../../daemon/dev/netns.ts";
import { stableMac } from "../../daemon/net/naming.ts";
import { findPlugin } from "../../daemon/net/delegate.ts";

const opts = { ignore: !IS_ROOT || !(await findPlugin("host-local", ["/usr/lib/cni"])) };

/** A random /24 for an attachment's host-local range. */
function attachmentSubnet(): string {
  return `172.${16 + Math.floor(Math.random() * 16)}.${Math.floor(Math.random() * 256)}.0/24`;
}

function hostLocal(ferry: TestFerry, subnet: string) {
  return { type: "host-local", ranges: [[{ subnet }]], dataDir: `${ferry.dir}/host-local` };
}

/** Addresses host-local still holds for the network (its files named like an address). */
async function hostLocalHeld(ferry: TestFerry, network: string): Promise<string[]> {
  const held: string[] = [];
  try {
    for await (const e of Deno.readDir(`${ferry.dir}/host-local/${network}`)) {
      if (/^\d+\.\d+\.\d+\.\d+$/.test(e.name)) held.push(e.name);
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return held;
}

const conf = (name: string, attachment: Record<string, unknown>) =>
  netconf("1.0.0", { name, attachment });

async function add(ferry: TestFerry, ns: TestNetns, id: string, stdin: string) {
  const out = await ferry.shim(cniEnv("ADD", ns, id, "net1"), stdin);
  assertEquals(out.code, 0, out.stdout + out.stderr);
  return out.json as { ips: { address: string }[]; interfaces: { name: string; mac: string }[] };
}

for (const kind of ["macvlan", "ipvlan"] as const) {
  // This machine's kernel has no ipvlan; the test runs wherever the kernel has it.
  const supported = !opts.ignore && await kernelSupports(kind);
  Deno.test({
    name: `${kind}: two pods on one master reach each other; CHECK, DEL and IPAM release work`,
    ignore: !supported,
    fn: () =>
      withMasterLink((master) =>
        withFerry({}, (ferry) =>
          withNetns(2, async ([a, b]) => {
            const network = `${kind}-${uniqueToken()}`;
            const stdin = conf(network, {
              type: kind,
              master,
              mode: kind === "macvlan" ? "bridge" : "l2",
              mtu: 1400,
              ipam: hostLocal(ferry, attachmentSubnet()),
            });
            const ids = [`c${uniqueToken()}`, `c${uniqueToken()}`];
            const ra = await add(ferry, a, ids[0], stdin);
            const rb = await add(ferry, b, ids[1], stdin);
            const [link] = JSON.parse(await ipIn(a, "-j", "-d", "link", "show", "dev", "net1"));
            assertEquals([link.linkinfo.info_kind, link.mtu], [kind, 1400]);
            const expectedMac = kind === "macvlan"
              ? stableMac(ids[0], "net1", "container")
              : (await Deno.readTextFile(`/sys/class/net/${master}/address`)).trim();
            assertEquals([link.address, ra.interfaces[0].mac], [expectedMac, expectedMac]);
            assertMatch(ra.ips[0].address, /\/24$/);
            assertEquals((await hostLocalHeld(ferry, network)).length, 2);
            assert(
              await pingOnce(rb.ips[0].address.split("/")[0], a),
              `pod a cannot reach pod b over ${kind}`,
            );

            assertEquals((await ferry.shim(cniEnv("CHECK", a, ids[0], "net1"), stdin)).code, 0);
            await ipIn(a, "addr", "flush", "dev", "net1");
            const check = await ferry.shim(cniEnv("CHECK", a, ids[0], "net1"), stdin);
            assertEquals(check.json?.code, 100);
            assertMatch(String(check.json?.msg), /net1 lacks address/);
            // The IPAM plugin is asked too: host-local no longer holding the address is an error.
            await Deno.remove(
              `${ferry.dir}/host-local/${network}/${ra.ips[0].address.split("/")[0]}`,
            );
            const lost = await ferry.shim(cniEnv("CHECK", a, ids[0], "net1"), stdin);
            assertEquals(lost.code, 1);
            assertMatch(`${lost.json?.msg} ${lost.json?.details}`, /host-local/);

            for (const [i, ns] of [a, b].entries()) {
              const del = await ferry.shim(cniEnv("DEL", ns, ids[i], "net1"), stdin);
              assertEquals(del.code, 0, del.stdout);
              assertEquals(await linkInNetns(ns, "net1"), false);
            }
            assertEquals(await hostLocalHeld(ferry, network), []);
            assertEquals(await ferry.records(), []);
            assertEquals(
              await ferry.allocations(),
              [],
              "the default network's pools are untouched",
            );
          }))
      ),
  });
}

Deno.test({
  name: "a macvlan on a master that does not exist fails with code 5 and gives its address back",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const network = `mv-${uniqueToken()}`;
        const stdin = conf(network, {
          type: "macvlan",
          master: `fyx${uniqueToken()}`,
          ipam: hostLocal(ferry, attachmentSubnet()),
        });
        const out = await ferry.shim(cniEnv("ADD", ns, `c${uniqueToken()}`, "net1"), stdin);
        assertEquals([out.code, out.json?.code], [1, 5], out.stdout);
        assertMatch(String(out.json?.msg), /failed to plug macvlan net1/);
        assertEquals(await hostLocalHeld(ferry, network), []);
        assertEquals(await ferry.records(), []);
        assertEquals(await linkInNetns(ns, "net1"), false);
      })),
});

Deno.test({
  name: "a bad attachment is refused with code 7 naming the problem, and nothing is plugged",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const cases: [unknown, RegExp][] = [
          [{ type: "macvlan", master: "eth 0" }, /macvlan config of network bad.*\/master/],
          [{ type: "macvlan", master: "eth0", mode: "sideways" }, /\/mode/],
          [{ type: "ipvlan", master: "x", mtu: 20 }, /\/mtu/],
          ["macvlan", /attachment must be a network config with a type/],
          [{ type: "ferry" }, /cannot be of type ferry itself/],
          [{ type: "no-such-plugin" }, /failed to find plugin "no-such-plugin"/],
          [
            { type: "macvlan", master: "lo", ipam: { type: "../../bin/sh" } },
            /invalid plugin type/,
          ],
        ];
        for (const [attachment, message] of cases) {
          const out = await ferry.shim(
            cniEnv("ADD", ns, `c${uniqueToken()}`, "net1"),
            netconf("1.0.0", { name: "bad", attachment }),
          );
          assertEquals([out.code, out.json?.code], [1, 7], JSON.stringify(attachment) + out.stdout);
          assertMatch(`${out.json?.msg} ${out.json?.details ?? ""}`, message);
        }
        assertEquals(await ferry.records(), []);
        assertEquals(await linkInNetns(ns, "net1"), false);
      })),
});

Deno.test({
  name:
    "any other type is delegated: Debian's bridge plugin plugs net1, DEL gets the cached result",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const network = `dl-${uniqueToken()}`;
        const bridge = `fyb${uniqueToken()}`;
        const stdin = conf(network, {
          type: "bridge",
          bridge,
          ipam: hostLocal(ferry, attachmentSubnet()),
        });
        try {
          const id = `c${uniqueToken()}`;
          const r = await add(ferry, ns, id, stdin);
          assertEquals(r.interfaces.map((i) => i.name).includes("net1"), true);
          assert(await hostLinkExists(bridge), "the reference plugin made its bridge");
          assertMatch(
            await ipIn(ns, "-4", "addr", "show", "dev", "net1"),
            new RegExp(`inet ${r.ips[0].address}`),
          );
          assertEquals((await ferry.shim(cniEnv("CHECK", ns, id, "net1"), stdin)).code, 0);
          const del = await ferry.shim(cniEnv("DEL", ns, id, "net1"), stdin);
          assertEquals(del.code, 0, del.stdout);
          assertEquals(await linkInNetns(ns, "net1"), false);
          assertEquals(await hostLocalHeld(ferry, network), []);
          assertEquals(await ferry.records(), []);
        } finally {
          await run("ip", "link", "del", bridge).catch(() => {});
        }
      })),
});

Deno.test({
  name: "ipvlan where the kernel lacks it fails with code 5 and gives its address back",
  ignore: opts.ignore || await kernelSupports("ipvlan"),
  fn: () =>
    withMasterLink((master) =>
      withFerry({}, (ferry) =>
        withNetns(1, async ([ns]) => {
          const network = `iv-${uniqueToken()}`;
          const stdin = conf(network, {
            type: "ipvlan",
            master,
            mode: "l3",
            ipam: hostLocal(ferry, attachmentSubnet()),
          });
          const out = await ferry.shim(cniEnv("ADD", ns, `c${uniqueToken()}`, "net1"), stdin);
          assertEquals([out.code, out.json?.code], [1, 5], out.stdout);
          assertMatch(String(out.json?.details), /Unknown device type/);
          assertEquals(await hostLocalHeld(ferry, network), []);
          assertEquals(await ferry.records(), []);
        }))
    ),
});

Deno.test({
  name: "DEL of a macvlan whose namespace is gone still releases its address",
  ...opts,
  fn: () =>
    withMasterLink((master) =>
      withFerry({}, async (ferry) => {
        const network = `mv-${uniqueToken()}`;
        const stdin = conf(network, {
          type: "macvlan",
          master,
          ipam: hostLocal(ferry, attachmentSubnet()),
        });
        const id = `c${uniqueToken()}`;
        let path = "";
        await withNetns(1, async ([ns]) => {
          path = ns.path;
          await add(ferry, ns, id, stdin);
          assertEquals((await hostLocalHeld(ferry, network)).length, 1);
        });
        for (const netns of [{ path }, undefined]) {
          const del = await ferry.shim(cniEnv("DEL", netns, id, "net1"), stdin);
          assertEquals(del.code, 0, del.stdout);
        }
        assertEquals(await hostLocalHeld(ferry, network), []);
        assertEquals(await ferry.records(), []);
      })
    ),
});

Deno.test({
  name: "a macvlan with static IPAM gets exactly the configured address and route",
  ...opts,
  fn: () =>
    withMasterLink((master) =>
      withFerry({}, (ferry) =>
        withNetns(1, async ([ns]) => {
          const stdin = conf(`st-${uniqueToken()}`, {
            type: "macvlan",
            master,
            ipam: {
              type: "static",
              addresses: [{ address: "192.168.77.10/24", gateway: "192.168.77.1" }],
              routes: [{ dst: "192.168.0.0/16", gw: "192.168.77.1" }],
            },
          });
          const id = `c${uniqueToken()}`;
          const r = await add(ferry, ns, id, stdin);
          assertEquals(r.ips.map((ip) => ip.address), ["192.168.77.10/24"]);
          assertMatch(await ipIn(ns, "-4", "addr", "show", "dev", "net1"), /192\.168\.77\.10\/24/);
          assertMatch(
            await ipIn(ns, "route", "show", "192.168.0.0/16"),
            /via 192\.168\.77\.1 dev net1/,
          );
          assertEquals((await ferry.shim(cniEnv("CHECK", ns, id, "net1"), stdin)).code, 0);
          assertEquals((await ferry.shim(cniEnv("DEL", ns, id, "net1"), stdin)).code, 0);
          assertEquals(await linkInNetns(ns, "net1"), false);
        }))
    ),
});

Deno.test({
  name: "GC of an attachment network releases only its own unlisted attachments",
  ...opts,
  fn: () =>
    withMasterLink((master) =>
      withFerry({}, (ferry) =>
        withNetns(3, async ([a, b, c]) => {
          const network = `gc-${uniqueToken()}`;
          const attachment = {
            type: "macvlan",
            master,
            ipam: hostLocal(ferry, attachmentSubnet()),
          };
          const ids = [a, b, c].map(() => `c${uniqueToken()}`);
          assertEquals((await ferry.shim(cniEnv("ADD", a, ids[0]), netconf())).code, 0);
          await add(ferry, b, ids[1], conf(network, attachment));
          await add(ferry, c, ids[2], conf(network, attachment));
          const gc = await ferry.shim(
            cniEnv("GC", undefined, ids[0]),
            netconf("1.1.0", {
              name: network,
              attachment,
              "cni.dev/valid-attachments": [{ containerID: ids[2], ifname: "net1" }],
            }),
          );
          assertEquals(gc.code, 0, gc.stdout);
          assertEquals(await linkInNetns(b, "net1"), false);
          assertEquals(await linkInNetns(c, "net1"), true);
          assertEquals((await hostLocalHeld(ferry, network)).length, 1);
          assertEquals((await ferry.allocations()).length, 1, "the default network is untouched");
          assertEquals(await linkInNetns(a, "eth0"), true);
          assertEquals(
            (await ferry.shim(cniEnv("DEL", c, ids[2], "net1"), conf(network, attachment))).code,
            0,
          );
          assertEquals((await ferry.shim(cniEnv("DEL", a, ids[0]), netconf())).code, 0);
          assertEquals(await ferry.records(), []);
        }))
    ),
});
