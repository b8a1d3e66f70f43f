// The reference CNI runtime library as a client: Debian's libcni (spec up to 1.0.0) drives a
// conflist whose first plugin is the installed Ferry shim, chained with Debian's `tuning`
// plugin, through VALIDATE (VERSION of every plugin), ADD, CHECK and DEL. libcni must accept
// every result Ferry prints, and tuning must find Ferry's interface in it.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import { compareVersions } from "../../lib/cni/versions.ts";
import { withFerry } from "../../daemon/dev/harness.ts";
import { buildLibcniDriver, HAVE_LIBCNI } from "../../daemon/dev/libcni.ts";
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
