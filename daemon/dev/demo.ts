/**
 * `deno task demo` (as root): Ferry's main job end to end on this machine. Starts a daemon on a
 * temporary socket, installs the shim, plugs three pod namespaces through it exactly as a
 * container runtime would, prints what was plugged, proves the host reaches every pod, deletes
 * them, and verifies that no namespace, link, address or record is left.
 *
 * @module
 */
import { hostLinkName } from "../net/naming.ts";
import { netconf, withFerry } from "./harness.ts";
import { IS_ROOT, run, uniqueToken, withNetns } from "./netns.ts";

interface Row {
  pod: string;
  netns: string;
  iface: string;
  hostLink: string;
  mac: string;
  address: string;
  ping: string;
}

function table(rows: Row[]): string {
  const cols = Object.keys(rows[0]) as (keyof Row)[];
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => r[c].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(width[i])).join("  ");
  return [
    line(cols),
    line(width.map((w) => "-".repeat(w))),
    ...rows.map((r) => line(cols.map((c) => r[c]))),
  ].join("\n");
}

async function pingOnce(address: string): Promise<boolean> {
  const out = await new Deno.Command("ping", {
    args: ["-c", "1", "-W", "2", address],
    stdout: "null",
    stderr: "null",
  })
    .output();
  return out.success;
}

/** Runs the demo; resolves to true when every step held. */
export async function demo(): Promise<boolean> {
  const conf = netconf("1.0.0");
  const ids = ["web-0", "web-1", "db-0"].map((pod) => ({ pod, id: `demo${uniqueToken()}` }));
  let ok = true;
  await withFerry(
    { config: { network: { subnet: "10.244.250.0/24", mtu: 1500 } } },
    (ferry) =>
      withNetns(ids.length, async (namespaces) => {
        console.log(`daemon on ${ferry.config.socket}; shim installed at ${ferry.shimPath}\n`);
        const rows: Row[] = [];
        for (const [i, ns] of namespaces.entries()) {
          const { pod, id } = ids[i];
          const env = {
            CNI_COMMAND: "ADD",
            CNI_CONTAINERID: id,
            CNI_NETNS: ns.path,
            CNI_IFNAME: "eth0",
            CNI_PATH: "/usr/lib/cni",
            CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod}`,
          };
          const add = await ferry.shim(env, conf);
          if (add.code !== 0) throw new Error(`ADD ${pod} failed: ${add.stdout}`);
          const result = add.json as {
            interfaces: { name: string; mac: string }[];
            ips: { address: string }[];
          };
          const address = result.ips[0].address;
          const reachable = await pingOnce(address.split("/")[0]);
          ok &&= reachable;
          rows.push({
            pod: `default/${pod}`,
            netns: ns.name,
            iface: "eth0",
            hostLink: result.interfaces[0].name,
            mac: result.interfaces[1].mac,
            address,
            ping: reachable ? "ok" : "FAILED",
          });
        }
        console.log(table(rows) + "\n");
        for (const [i, ns] of namespaces.entries()) {
          const del = await ferry.shim({
            CNI_COMMAND: "DEL",
            CNI_CONTAINERID: ids[i].id,
            CNI_NETNS: ns.path,
            CNI_IFNAME: "eth0",
            CNI_PATH: "/usr/lib/cni",
          }, conf);
          if (del.code !== 0) throw new Error(`DEL ${ids[i].pod} failed: ${del.stdout}`);
        }
        const leftLinks = [];
        for (const { id } of ids) {
          const probe = await new Deno.Command("ip", {
            args: ["link", "show", hostLinkName(id, "eth0")],
            stderr: "null",
            stdout: "null",
          }).output();
          if (probe.success) leftLinks.push(hostLinkName(id, "eth0"));
        }
        const leftAllocations = [];
        for await (
          const e of Deno.readDir(`${ferry.config.stateDir}/ipam/10.244.250.0_24`)
        ) leftAllocations.push(e.name);
        const leftRecords = [];
        for await (const e of Deno.readDir(`${ferry.config.stateDir}/attachments`)) {
          leftRecords.push(e.name);
        }
        const leftInPods = [];
        for (const ns of namespaces) {
          if ((await run("ip", "-n", ns.name, "-o", "link", "show")).includes("eth0")) {
            leftInPods
              .push(ns.name);
          }
        }
        console.log(
          `after DEL: host links left: ${leftLinks.length}, pod interfaces left: ${leftInPods.length}, ` +
            `addresses still allocated: ${leftAllocations.length}, records left: ${leftRecords.length}`,
        );
        ok &&=
          leftLinks.length + leftInPods.length + leftAllocations.length + leftRecords.length === 0;
        return namespaces.map((n) => n.name);
      }, "fydemo").then(async (names) => {
        const list = await run("ip", "netns", "list");
        const leftNs = names.filter((n) => list.includes(n));
        console.log(`namespaces left after teardown: ${leftNs.length}`);
        ok &&= leftNs.length === 0;
      }),
  );
  return ok;
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error(
      "deno task demo plugs real network namespaces and must run as root (try: sudo deno task demo)",
    );
    Deno.exit(2);
  }
  const ok = await demo();
  console.log(
    ok
      ? "\ndemo: every pod was plugged, reachable, and cleanly removed"
      : "\ndemo: FAILED (see above)",
  );
  Deno.exit(ok ? 0 : 1);
}
