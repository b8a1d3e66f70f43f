// The reference CNI runtime library as a client: Debian's libcni (spec up to 1.0.0) drives a
// conflist whose first plugin is the installed Ferry shim, chained with Debian's `tuning`
// plugin, through VALIDATE (VERSION of every plugin), ADD, CHECK and DEL. libcni must accept
// every result Ferry prints, and tuning must find Ferry's interface in it.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import { compareVersions } from "../../lib/cni/versions.ts";
import { withFerry } from "../../daemon/dev/harness.ts";
import {
  buildLibcniDriver,
  HAVE_LIBCNI,
  type LibcniOp,
  runLibcniBatch,
} from "../../daemon/dev/libcni.ts";
import { ipIn, IS_ROOT, linkInNetns, run, uniqueToken, withNetns } from "../../daemon/dev/netns.ts";

const HAVE_TUNING = await Deno.stat("/usr/lib/cni/tuning").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !HAVE_LIBCNI || !HAVE_TUNING };

for (const version of ["0.3.1", "0.4.0", "1.0.0"]) {
  Deno.test({
    name:
      `libcni runs a ${version} conflist of Ferry chained with tuning through ADD, CHECK and DEL`,
    ...opts,
    fn: () =>
      withFerry({}, (ferry) =>
        withNetns(1, async ([ns]) => {
          const driver = await buildLibcniDriver(ferry.dir);
          const conflist = `${ferry.dir}/chain.conflist`;
          await Deno.writeTextFile(
            conflist,
            JSON.stringify({
              cniVersion: version,
              name: "ferry-chain",
              plugins: [{ type: "ferry" }, {
                type: "tuning",
                sysctl: { "net.ipv4.conf.eth0.arp_notify": "1" },
              }],
            }),
          );
          const id = `c${uniqueToken()}`;
          const drive = async (command: string) => {
            const out = await new Deno.Command(driver, {
              args: [command, conflist, id, ns.path, "eth0", `${ferry.dir}/cnicache`],
              env: {
                CNI_PATH: `${ferry.dir}/bin:/usr/lib/cni`,
                CNI_ARGS:
                  `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p-${id};K8S_POD_INFRA_CONTAINER_ID=${id}`,
              },
              clearEnv: true,
              stdout: "piped",
              stderr: "piped",
            }).output();
            const text = new TextDecoder().decode(out.stdout);
            assert(out.success, `${command}: ${text}${new TextDecoder().decode(out.stderr)}`);
            return text;
          };
          assertEquals(JSON.parse(await drive("VALIDATE")), []);
          const result = JSON.parse(await drive("ADD"));
          assertEquals(result.cniVersion, version);
          const address = result.ips[0].address.split("/")[0];
          assertMatch(
            await ipIn(ns, "-4", "addr", "show", "dev", "eth0"),
            new RegExp(`inet ${address}/24`),
          );
          assertEquals(
            (await run(
              "ip",
              "netns",
              "exec",
              ns.name,
              "sysctl",
              "-n",
              "net.ipv4.conf.eth0.arp_notify",
            )).trim(),
            "1",
          );
          if (compareVersions(version, "0.4.0") >= 0) await drive("CHECK");
          await drive("DEL");
          assertEquals(await linkInNetns(ns, "eth0"), false);
        })),
  });
}

Deno.test({
  name:
    "the benchmark's libcni batches run ADDs at once and report each call's time and error, in order",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(3, async (namespaces) => {
        const driver = await buildLibcniDriver(ferry.dir);
        const conflist = `${ferry.dir}/bench.conflist`;
        await Deno.writeTextFile(
          conflist,
          JSON.stringify({ cniVersion: "1.0.0", name: "ferry", plugins: [{ type: "ferry" }] }),
        );
        const ids = namespaces.map(() => `c${uniqueToken()}`);
        const op = (cmd: "ADD" | "DEL", i: number) => ({
          cmd,
          conflist,
          id: ids[i],
          netns: namespaces[i].path,
          ifname: "eth0",
          args: "IgnoreUnknown=1",
        });
        const batch = (ops: LibcniOp[]) =>
          runLibcniBatch(driver, {
            cniPath: `${ferry.dir}/bin:/usr/lib/cni`,
            cacheDir: `${ferry.dir}/cnicache`,
            concurrency: 3,
            ops,
          });
        // The third ADD names a namespace that does not exist: its error comes back in place.
        const adds = await batch([op("ADD", 0), op("ADD", 1), {
          ...op("ADD", 2),
          netns: "/var/run/netns/absent",
        }]);
        assertEquals(adds.ops.map((o) => o.error === undefined), [true, true, false]);
        assertMatch(adds.ops[2].error!, /CNI_NETNS|namespace/);
        assert(
          adds.ops.every((o) => o.ms > 0) && adds.wallMs >= Math.max(...adds.ops.map((o) => o.ms)),
        );
        assertEquals(await linkInNetns(namespaces[0], "eth0"), true);
        const dels = await batch([op("DEL", 0), op("DEL", 1)]);
        assertEquals(dels.ops.map((o) => o.error), [undefined, undefined]);
        assertEquals(await ferry.allocations(), []);
        // The process-start floor: a program run with only CNI_COMMAND=VERSION.
        const exec = await batch([{
          cmd: "EXEC",
          program: ferry.shimPath,
          env: ["CNI_COMMAND=VERSION"],
        }]);
        assertEquals(exec.ops[0].error, undefined);
      })),
});
