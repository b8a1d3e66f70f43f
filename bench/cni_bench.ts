/**
 * `deno task bench` (as root): how fast Ferry answers, measured on this machine, written to
 * `bench/results/latest.json` and `bench/results/latest.md`.
 *
 * - shim cold start: the installed shim answering VERSION (process start to exit);
 * - daemon ADD / DEL: the daemon's own handling (request in → interface configured → response
 *   out), timed on its socket without the shim, with in-process netlink (the default) and with
 *   iproute2 batches;
 * - shim ADD / DEL: the whole invocation as a runtime sees it;
 * - 100 concurrent ADDs through the shim: p99 of their latencies.
 *
 * Targets live here, never in tests.
 *
 * @module
 */
import { netconf, type TestFerry, withFerry } from "../daemon/dev/harness.ts";
import { IS_ROOT, uniqueToken, withNetns } from "../daemon/dev/netns.ts";
import { CNI_REQUEST_PATH } from "../lib/socket_api.ts";
import { unixRequest } from "../lib/unix_http.ts";

/** Summary of one series, in milliseconds. */
interface Series {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

function summarize(samples: number[]): Series {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q: number) =>
    Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))] * 10) / 10;
  return {
    n: s.length,
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: Math.round(s[s.length - 1] * 10) / 10,
  };
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

const env = (command: string, cid: string, netns?: string) => ({
  CNI_COMMAND: command,
  CNI_CONTAINERID: cid,
  CNI_IFNAME: "eth0",
  CNI_PATH: "/usr/lib/cni",
  ...(netns ? { CNI_NETNS: netns } : {}),
});

/** The daemon's own handling of ADD and DEL, timed on its socket without the shim. */
async function daemonSeries(
  ferry: TestFerry,
  n: number,
  label: string,
): Promise<Record<string, Series>> {
  return await withNetns(n, async (namespaces) => {
    const add: number[] = [], del: number[] = [];
    for (const ns of namespaces) {
      const cid = `b${uniqueToken()}`;
      const req = (command: string) =>
        JSON.stringify({
          command,
          containerId: cid,
          netns: ns.path,
          ifname: "eth0",
          args: {},
          path: [],
          config: JSON.parse(netconf()),
        });
      const [a, res] = await timed(() =>
        unixRequest(
          ferry.config.socket,
          "POST",
          CNI_REQUEST_PATH,
          req("ADD"),
          AbortSignal.timeout(10_000),
        )
      );
      if (res.status !== 200) throw new Error(res.body);
      add.push(a);
      del.push(
        (await timed(() =>
          unixRequest(
            ferry.config.socket,
            "POST",
            CNI_REQUEST_PATH,
            req("DEL"),
            AbortSignal.timeout(10_000),
          )
        ))[0],
      );
    }
    return {
      [`daemon ADD${label} (socket in → response out)`]: summarize(add),
      [`daemon DEL${label}`]: summarize(del),
    };
  });
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("the benchmark plugs real namespaces and must run as root");
    Deno.exit(2);
  }
  const N = 40;
  const results: Record<string, Series> = {};
  await withFerry({ config: { logLevel: "error" } }, async (ferry) => {
    const version: number[] = [];
    for (let i = 0; i < N; i++) {
      version.push((await timed(() => ferry.shim({ CNI_COMMAND: "VERSION" }, "")))[0]);
    }
    results["shim cold start (VERSION)"] = summarize(version);

    Object.assign(results, await daemonSeries(ferry, N, ""));

    await withNetns(N, async (namespaces) => {
      const add: number[] = [], del: number[] = [];
      for (const ns of namespaces) {
        const cid = `b${uniqueToken()}`;
        const [a, out] = await timed(() => ferry.shim(env("ADD", cid, ns.path), netconf()));
        if (out.code !== 0) throw new Error(out.stdout);
        add.push(a);
        del.push((await timed(() => ferry.shim(env("DEL", cid, ns.path), netconf())))[0]);
      }
      results["shim ADD (exec to exit)"] = summarize(add);
      results["shim DEL"] = summarize(del);
    });

    await withNetns(100, async (namespaces) => {
      const cids = namespaces.map(() => `b${uniqueToken()}`);
      const times = await Promise.all(namespaces.map(async (ns, i) => {
        const [t, out] = await timed(() => ferry.shim(env("ADD", cids[i], ns.path), netconf()));
        if (out.code !== 0) throw new Error(out.stdout);
        return t;
      }));
      results["100 concurrent shim ADDs"] = summarize(times);
      await Promise.all(
        namespaces.map((ns, i) => ferry.shim(env("DEL", cids[i], ns.path), netconf())),
      );
    });
  });

  await withFerry(
    { config: { logLevel: "error", network: { plumbing: "iproute2" } } },
    async (ferry) => Object.assign(results, await daemonSeries(ferry, N, " with iproute2")),
  );

  // Targets (issue 4): the daemon's own ADD at p50 ≤ 10 ms.
  const targets = [{
    what: "daemon ADD p50 ≤ 10 ms (in-process netlink)",
    met: results["daemon ADD (socket in → response out)"].p50 <= 10,
  }];

  const machine = {
    cpus: navigator.hardwareConcurrency,
    deno: Deno.version.deno,
    date: new Date().toISOString(),
  };
  const dir = new URL("./results/", import.meta.url);
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(
    new URL("latest.json", dir),
    JSON.stringify({ machine, results, targets }, null, 2) + "\n",
  );
  const rows = Object.entries(results).map(([k, s]) =>
    `| ${k} | ${s.n} | ${s.p50} | ${s.p90} | ${s.p99} | ${s.max} |`
  );
  const table = [
    "| series (ms) | n | p50 | p90 | p99 | max |",
    "| --- | --- | --- | --- | --- | --- |",
    ...rows,
  ].join("\n");
  await Deno.writeTextFile(
    new URL("latest.md", dir),
    `# Ferry benchmark\n\n${machine.date}, ${machine.cpus} CPUs, Deno ${machine.deno}\n\n${table}\n\n` +
      targets.map((t) => `- ${t.met ? "met" : "NOT met"}: ${t.what}`).join("\n") + "\n",
  );
  console.log(table);
  for (const t of targets) console.log(`${t.met ? "met" : "NOT met"}: ${t.what}`);
}
