// Regression tests for the defects an independent probe found (issue 14), each through the
// installed shim and a running daemon with real namespaces: a failed ADD never removes an
// interface it did not create, the daemon's own namespace and files that are not namespaces are
// refused before any plumbing, a FIFO cannot freeze the daemon, an ADD whose requester went away
// is rolled back, a killed allocation leaves nothing that is never freed, and the runtime's
// environment never reaches Deno. Needs root; everything is removed also when a test fails.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cniEnv, netconf, type TestFerry, withFerry } from "../../daemon/dev/harness.ts";
import {
  hostLinkExists,
  IS_ROOT,
  linkInNetns,
  run,
  type TestNetns,
  uniqueToken,
  withMasterLink,
  withNetns,
  withTempDir,
} from "../../daemon/dev/netns.ts";
import { hostLinkName } from "../../daemon/net/naming.ts";
import { findPlugin } from "../../daemon/net/delegate.ts";
import { NetlinkPlumber } from "../../daemon/net/netlink/netlink_plumber.ts";
import { Libc } from "../../daemon/net/netlink/libc.ts";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import type { Plumber, VethSpec } from "../../daemon/net/plumber.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { CNI_REQUEST_PATH, HEALTHZ_PATH } from "../../lib/socket_api.ts";
import { parseCniArgs } from "../../lib/cni/args.ts";
import { lines, waitForLine, withCapturedLogs } from "./_logs.ts";

const opts = { ignore: !IS_ROOT || !(await findPlugin("host-local", ["/usr/lib/cni"])) };

function hostLocal(ferry: TestFerry) {
  const n = Math.floor(Math.random() * 256);
  return {
    type: "host-local",
    ranges: [[{ subnet: `172.${16 + (n % 16)}.${n}.0/24` }]],
    dataDir: `${ferry.dir}/host-local`,
  };
}

async function addDefault(ferry: TestFerry, ns: TestNetns, id: string) {
  const out = await ferry.shim(cniEnv("ADD", ns, id), netconf());
  assertEquals(out.code, 0, out.stdout + out.stderr);
  return out;
}

for (
  const [kind, attachment] of [
    ["macvlan", (master: string) => ({ type: "macvlan", master })],
    ["delegated bridge", (master: string) => ({ type: "bridge", bridge: `fyb${master.slice(3)}` })],
  ] as const
) {
  Deno.test({
    name: `a failed ${kind} ADD leaves another container's interface of the same name alone`,
    ...opts,
    fn: () =>
      withFerry({}, (ferry) =>
        withNetns(1, ([ns]) =>
          withMasterLink(async (master) => {
            try {
              const a = `a${uniqueToken()}`, b = `b${uniqueToken()}`;
              await addDefault(ferry, ns, a);
              const stdin = netconf("1.0.0", {
                name: "lan",
                attachment: { ...attachment(master), ipam: hostLocal(ferry) },
              });
              const out = await ferry.shim(cniEnv("ADD", ns, b, "eth0"), stdin);
              assertEquals([out.code, out.json?.code], [1, 5], out.stdout);
              assert(String(out.json?.msg).includes("already exists"), out.stdout);
              // A is untouched: its interface, its host end, its record, and CHECK passes.
              assertEquals(await linkInNetns(ns, "eth0"), true);
              assertEquals(await hostLinkExists(hostLinkName(a, "eth0")), true);
              const check = await ferry.shim(cniEnv("CHECK", ns, a), netconf());
              assertEquals(check.code, 0, check.stdout);
              assertEquals((await ferry.records()).length, 1);
            } finally {
              // The delegated bridge plugin's bridge, had it ever run (it must not).
              await run("ip", "link", "del", `fyb${master.slice(3)}`).catch(() => {});
            }
          }))),
  });
}

for (const plumbing of ["netlink", "iproute2"] as const) {
  Deno.test({
    name:
      `a failed default-network ADD (${plumbing}) leaves another container's interface of the same name alone`,
    ...opts,
    fn: () =>
      withFerry({ config: { network: { plumbing } } }, (ferry) =>
        withNetns(1, async ([ns]) => {
          const a = `a${uniqueToken()}`, b = `b${uniqueToken()}`;
          await addDefault(ferry, ns, a);
          const out = await ferry.shim(cniEnv("ADD", ns, b), netconf());
          assertEquals([out.code, out.json?.code], [1, 5], out.stdout);
          assertEquals(await linkInNetns(ns, "eth0"), true);
          assertEquals(await hostLinkExists(hostLinkName(a, "eth0")), true);
          assertEquals(await hostLinkExists(hostLinkName(b, "eth0")), false);
          const check = await ferry.shim(cniEnv("CHECK", ns, a), netconf());
          assertEquals(check.code, 0, check.stdout);
          assertEquals((await ferry.records()).length, 1);
          assertEquals((await ferry.allocations()).length, 1, "B's address was given back");
        })),
  });
}

Deno.test({
  name:
    "the daemon's own namespace is refused with code 4 for ADD, CHECK and DEL, and no node link is touched",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withMasterLink(async (master) => {
        const nodeNs = `fyt-node-${uniqueToken()}`;
        await run("ip", "netns", "attach", nodeNs, String(Deno.pid));
        try {
          const paths = [
            "/proc/self/ns/net",
            `/proc/${Deno.pid}/ns/net`,
            `/var/run/netns/${nodeNs}`,
          ];
          for (const path of paths) {
            const id = `c${uniqueToken()}`;
            const ns = { name: "node", path };
            // A macvlan DEL naming a node link (the probe's uplink), then ADDs of both kinds.
            const mac = netconf("1.0.0", {
              name: "lan",
              attachment: { type: "macvlan", master, ipam: hostLocal(ferry) },
            });
            for (
              const [command, ifname, stdin] of [
                ["DEL", master, mac],
                ["ADD", "eth0", netconf()],
                ["ADD", master, mac],
                ["CHECK", master, mac],
              ]
            ) {
              const out = await ferry.shim(cniEnv(command, ns, id, ifname), stdin);
              assertEquals([out.code, out.json?.code], [1, 4], `${command} ${path}: ${out.stdout}`);
            }
            assertEquals(await hostLinkExists(master), true, `${master} survives ${path}`);
            assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
          }
          assertEquals(await ferry.allocations(), []);
          assertEquals(await ferry.records(), []);
        } finally {
          await run("ip", "netns", "del", nodeNs);
        }
      })),
});

Deno.test({
  name: "a FIFO or a regular file as CNI_NETNS is refused at once and the daemon keeps serving",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, ([ns]) =>
        withTempDir(async (dir) => {
          await run("mkfifo", `${dir}/fifo`);
          await Deno.writeTextFile(`${dir}/file`, "");
          for (const path of [`${dir}/fifo`, `${dir}/file`]) {
            const started = performance.now();
            const out = await ferry.shim(cniEnv("ADD", { path }, `c${uniqueToken()}`), netconf());
            assertEquals([out.code, out.json?.code], [1, 4], out.stdout);
            assert(performance.now() - started < 5000, "answered without waiting on the path");
          }
          const health = await unixRequest(
            ferry.config.socket,
            "GET",
            HEALTHZ_PATH,
            undefined,
            AbortSignal.timeout(2000),
          );
          assertEquals(health.status, 200);
          await addDefault(ferry, ns, `c${uniqueToken()}`);
          assertEquals((await ferry.allocations()).length, 1);
        }))),
});

/** The real plumber, with each veth plug held until `release` resolves. */
function heldPlumber(entered: () => void, release: Promise<void>): Plumber {
  const real = new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()));
  return new Proxy(real, {
    get(target, prop, receiver) {
      if (prop === "plugVeth") {
        return async (spec: VethSpec) => {
          entered();
          await release;
          return target.plugVeth(spec);
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** The ADD request the shim would send for `id` in `ns`, as the socket's body. */
function addRequest(ns: TestNetns, id: string): string {
  return JSON.stringify({
    command: "ADD",
    containerId: id,
    netns: ns.path,
    ifname: "eth0",
    args: parseCniArgs(cniEnv("ADD", ns, id).CNI_ARGS),
    path: ["/usr/lib/cni"],
    config: JSON.parse(netconf()),
  });
}

/** The daemon's `ferry_cni_abandoned_total` and `ferry_cni_requests_total` lines for ADD. */
async function addCounters(ferry: TestFerry): Promise<string[]> {
  const text = await (await fetch(`http://${ferry.daemon().httpAddress}/metrics`)).text();
  return text.split("\n").filter((l) =>
    /^ferry_cni_(abandoned|requests)_total\{command="ADD"/.test(l)
  );
}

Deno.test({
  name:
    "an ADD abandoned by its requester while it waited for its container's turn is logged and counted as abandoned, not as error 999",
  ...opts,
  fn: async () => {
    const entered = Promise.withResolvers<void>();
    const release = Promise.withResolvers<void>();
    const plumber = heldPlumber(() => entered.resolve(), release.promise);
    try {
      await withCapturedLogs((records) =>
        withFerry({ daemon: { plumber } }, (ferry) =>
          withNetns(1, async ([ns]) => {
            const id = `c${uniqueToken()}`;
            // The first ADD holds the container's turn (its plug is held); the second, a retry
            // by a runtime whose first shim timed out, waits for the turn and its shim gives up.
            const first = unixRequest(
              ferry.config.socket,
              "POST",
              CNI_REQUEST_PATH,
              addRequest(ns, id),
              AbortSignal.timeout(30_000),
            ).catch((e: Error) => e);
            await entered.promise;
            const hangUp = new AbortController();
            const second = unixRequest(
              ferry.config.socket,
              "POST",
              CNI_REQUEST_PATH,
              addRequest(ns, id),
              hangUp.signal,
            ).catch((e) => e);
            const deadline = Date.now() + 5000;
            while ((ferry.daemon().stats().socket?.connections ?? 0) < 2) {
              assert(Date.now() < deadline, "the second ADD did not reach the daemon");
              await new Promise((r) => setTimeout(r, 10));
            }
            hangUp.abort();
            await second;
            const line = await waitForLine(records, "abandoned by its requester");
            assertEquals(
              line,
              `info ADD of pod default/pod-${id}, container ${id}, eth0: abandoned by its requester, rolled back`,
            );
            assertEquals(
              lines(records).filter((l) => l.includes("code 999") || l.startsWith("error")),
              [],
              "nothing logged as an internal error",
            );
            release.resolve();
            const served = await first;
            if (served instanceof Error) {
              throw new Error(`the first ADD was not answered: ${served}`);
            }
            assertEquals(served.status, 200, "the ADD that kept its requester is served");
            assertEquals(
              (await addCounters(ferry)).sort(),
              [
                'ferry_cni_requests_total{command="ADD",code="0"} 1',
                'ferry_cni_requests_total{command="ADD",code="11"} 1',
                'ferry_cni_abandoned_total{command="ADD"} 1',
              ].sort(),
            );
            assertEquals((await ferry.records()).length, 1);
          }))
      );
    } finally {
      release.resolve();
      plumber.close?.();
    }
  },
});

Deno.test({
  name: "an ADD whose requester hung up while it was being plugged is rolled back, not recorded",
  ...opts,
  fn: async () => {
    const entered = Promise.withResolvers<void>();
    const release = Promise.withResolvers<void>();
    const plumber = heldPlumber(() => entered.resolve(), release.promise);
    try {
      await withFerry({ daemon: { plumber } }, (ferry) =>
        withNetns(1, async ([ns]) => {
          const id = `c${uniqueToken()}`;
          const env = cniEnv("ADD", ns, id);
          const request = {
            command: "ADD",
            containerId: id,
            netns: ns.path,
            ifname: "eth0",
            args: parseCniArgs(env.CNI_ARGS),
            path: ["/usr/lib/cni"],
            config: JSON.parse(netconf()),
          };
          const hangUp = new AbortController();
          const sent = unixRequest(
            ferry.config.socket,
            "POST",
            CNI_REQUEST_PATH,
            JSON.stringify(request),
            hangUp.signal,
          ).catch((e) => e);
          await entered.promise;
          hangUp.abort(); // the shim timed out and went away
          await sent;
          release.resolve();
          // The daemon finishes the plug, sees nobody waits, and takes it all back.
          const deadline = Date.now() + 5000;
          while ((await ferry.allocations()).length || await linkInNetns(ns, "eth0")) {
            assert(Date.now() < deadline, "the abandoned ADD was not rolled back");
            await new Promise((r) => setTimeout(r, 50));
          }
          assertEquals(await ferry.records(), []);
          assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
          // Counted as abandoned, not as a failure of the daemon.
          while (
            !(await addCounters(ferry)).includes('ferry_cni_abandoned_total{command="ADD"} 1')
          ) {
            assert(Date.now() < deadline, `not counted: ${await addCounters(ferry)}`);
            await new Promise((r) => setTimeout(r, 20));
          }
          // The runtime's retry is served normally.
          await addDefault(ferry, ns, id);
          assertEquals((await ferry.records()).length, 1);
        }));
    } finally {
      release.resolve();
      plumber.close?.();
    }
  },
});

Deno.test({
  name:
    "an empty allocation file left by a kill -9 is freed at restart, and one a record names is restored",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(2, async ([a, b]) => {
        const idA = `a${uniqueToken()}`;
        const added = await addDefault(ferry, a, idA);
        const addrA = (added.json as { ips: { address: string }[] }).ips[0].address.split("/")[0];
        await ferry.stopDaemon();
        const poolDir = `${ferry.config.stateDir}/ipam/${
          (await Array.fromAsync(Deno.readDir(`${ferry.config.stateDir}/ipam`)))[0].name
        }`;
        // Killed between creating an allocation file and writing its owner, twice: once for
        // an address nobody holds, once for A's own.
        const free = addrA.replace(/\.(\d+)$/, (_, n) => `.${Number(n) + 100}`);
        await Deno.writeTextFile(`${poolDir}/${free}`, "");
        await Deno.writeTextFile(`${poolDir}/${addrA}`, "");
        await ferry.restartDaemon();
        assertEquals(await ferry.allocations(), [addrA]);
        assertEquals(await Deno.readTextFile(`${poolDir}/${addrA}`), `${idA}\neth0`);
        // A new pod does not get A's address; DEL of A frees it.
        const b1 = await addDefault(ferry, b, `b${uniqueToken()}`);
        assert(!JSON.stringify(b1.json).includes(`"${addrA}/`), "B got A's address");
        const del = await ferry.shim(cniEnv("DEL", a, idA), netconf());
        assertEquals(del.code, 0);
        assertEquals((await ferry.allocations()).includes(addrA), false);
      })),
});

Deno.test({
  name:
    "the runtime's environment never reaches Deno: DENO_V8_FLAGS, DENO_COVERAGE_DIR and NODE_OPTIONS change nothing",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, ([ns]) =>
        withTempDir(async (dir) => {
          const id = `c${uniqueToken()}`;
          await addDefault(ferry, ns, id);
          const hostile = {
            DENO_V8_FLAGS: "--help",
            DENO_COVERAGE_DIR: `${dir}/coverage`,
            NODE_OPTIONS: "--inspect",
            DENO_DIR: `${dir}/elsewhere`,
            HOME: dir,
          };
          const del = await ferry.shim({ ...cniEnv("DEL", ns, id), ...hostile }, netconf());
          assertEquals([del.code, del.stdout, del.stderr], [0, "", ""]);
          // The DEL reached the daemon: the attachment is gone.
          assertEquals(await ferry.records(), []);
          assertEquals(await linkInNetns(ns, "eth0"), false);
          const oom = await ferry.shim(
            { CNI_COMMAND: "VERSION", DENO_V8_FLAGS: "--max-old-space-size=1" },
            "",
          );
          assertEquals(oom.code, 0, oom.stderr);
          assertEquals(Array.isArray(oom.json?.supportedVersions), true);
          assertEquals(await Array.fromAsync(Deno.readDir(dir)), []);
        }))),
});

Deno.test({
  name:
    "a shim that removes the daemon's socket is undone: the daemon creates it again and /healthz says so",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const socket = ferry.config.socket;
        await Deno.remove(socket);
        const deadline = Date.now() + 5000;
        let health;
        while (true) {
          health = await unixRequest(
            socket,
            "GET",
            HEALTHZ_PATH,
            undefined,
            AbortSignal.timeout(500),
          )
            .catch(() => undefined);
          if (health) break;
          assert(Date.now() < deadline, "the socket was not created again");
          await new Promise((r) => setTimeout(r, 20));
        }
        assertEquals(health.status, 200);
        assert(health.body.includes("socket created again 1 time(s)"), health.body);
        assertEquals(((await Deno.stat(socket)).mode ?? 0) & 0o777, 0o600);
        // Pods are served through the new socket.
        await addDefault(ferry, ns, `c${uniqueToken()}`);
      })),
});
