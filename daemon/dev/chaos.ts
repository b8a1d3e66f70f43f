/**
 * `deno task chaos [--pods 200] [--concurrency 20] [--kills 12] [--api-outage 30] [--out FILE]`
 * (as root): the daemon killed with SIGKILL at random moments while pods churn, and the API
 * server gone for a while in the middle, then a count of what was lost or leaked.
 *
 * A daemon runs as its own process (so it can really be killed) for a node of the embedded API
 * stand-in, on its own bridge, subnet, socket and state directory, with the shim installed as
 * for a runtime. Workers act as a container runtime would for each pod: the pod is created
 * (bound to the node), its namespace made, ADD sent through the shim and repeated while the
 * answer is code 11, the pod held a moment, DEL sent and repeated until it succeeds (a DEL sent
 * while no daemon listens succeeds at once: the daemon's reconcile loop releases it when it is
 * back), the namespace and the pod removed. Meanwhile the daemon is killed and restarted, and once the API stand-in
 * pauses for `--api-outage` seconds: plugged pods must stay plugged (CHECK passes), readiness must
 * turn false and back, and the watch must resume.
 *
 * Verified: every ADD either succeeded or answered code 11; no address was handed to two live
 * pods; at the end (after a clean restart and at most 30 s of the reconcile loop) no allocation,
 * record or Ferry link on the bridge is left. The figures are
 * printed and written as JSON.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { install, installUnder } from "../../cni/install.ts";
import { CNI_ERROR } from "../../lib/cni/errors.ts";
import { READYZ_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { PODS } from "../k8s/resources.ts";
import { HOST_LINK_PREFIX } from "../net/naming.ts";
import { cniEnv, netconf, removeBridge, runShimAt, testSubnet } from "./harness.ts";
import { DaemonProcess } from "./daemon_process.ts";
import { KubeStandin } from "./kube_standin/server.ts";
import { IS_ROOT, run, uniqueToken } from "./netns.ts";

/** What to do. */
export interface ChaosOptions {
  /** Pods to churn through. */
  pods: number;
  /** Pods in flight at once. */
  concurrency: number;
  /** How many times the daemon is killed. */
  kills: number;
  /** How long the API stand-in is gone (0: never). */
  apiOutageSeconds: number;
  /** Where progress goes. */
  log?: (line: string) => void;
}

/** What happened. */
export interface ChaosReport {
  /** The options. */
  options: Omit<ChaosOptions, "log">;
  /** Wall time of the churn, in ms. */
  durationMs: number;
  /** ADD invocations: answered with a result, with code 11, with anything else. */
  adds: { ok: number; tryAgainLater: number; other: number };
  /** Pods whose ADD was still answered 11 after every retry (allowed, never plugged). */
  podsGivenUp: number;
  /** DEL invocations: succeeded, failed (and repeated). */
  dels: { ok: number; failed: number };
  /** Kills done, and daemon starts. */
  kills: number;
  /**
   * The API outage: whether readiness went false and came back, and how many CHECKs of pods
   * plugged before it (held through it) ran and passed.
   */
  apiOutage?: {
    seconds: number;
    readyWentFalse: boolean;
    readyCameBack: boolean;
    checks: number;
    checksPassed: boolean;
  };
  /** Addresses handed to a pod while another pod's interface still had them. */
  duplicateAddresses: string[];
  /**
   * Addresses handed out again while the earlier holder's DEL was still being retried, its
   * interface already gone (the daemon was killed between releasing and forgetting): allowed.
   */
  reassignedDuringDel: number;
  /** What was left at the end. */
  leaked: { allocations: string[]; records: string[]; hostLinks: string[] };
  /** Every answer that broke a rule, with its pod. */
  violations: string[];
  /** True when nothing was lost, doubled or leaked and every ADD answered a result or 11. */
  ok: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const between = (lo: number, hi: number) => lo + Math.random() * (hi - lo);

async function fileNames(dir: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) {
      if (e.isDirectory) {
        out.push(...(await fileNames(`${dir}/${e.name}`)).map((n) => `${e.name}/${n}`));
      } else if (!e.name.startsWith(".")) out.push(e.name);
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return out.sort();
}

async function bridgePorts(bridge: string): Promise<string[]> {
  const out = await new Deno.Command("ip", {
    args: ["-j", "link", "show", "master", bridge],
    stdout: "piped",
    stderr: "null",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  return text ? (JSON.parse(text) as { ifname: string }[]).map((l) => l.ifname) : [];
}

/**
 * Runs the churn with kills and an API outage, cleans up everything it made, and reports.
 *
 * @example
 * ```ts
 * const report = await runChaos({ pods: 40, concurrency: 8, kills: 4, apiOutageSeconds: 3 });
 * report.ok; // true
 * ```
 */
export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const log = options.log ?? (() => {});
  const token = uniqueToken();
  const node = `chaos-${token}`;
  const api = await KubeStandin.start({ token: crypto.randomUUID() });
  const dir = await Deno.makeTempDir({ prefix: `ferry-chaos-${token}-` });
  const bridge = `fc${token}`;
  const socket = `${dir}/run/ferry.sock`;
  const stateDir = `${dir}/state`;
  await Deno.writeTextFile(`${dir}/kubeconfig`, api.kubeconfig());
  await Deno.writeTextFile(
    `${dir}/config.json`,
    JSON.stringify({
      socket,
      stateDir,
      nodeName: node,
      kubeconfig: `${dir}/kubeconfig`,
      podWaitSeconds: 10,
      watch: { unhealthyAfterSeconds: 2, requestTimeoutSeconds: 3 },
      // A DEL answered while the daemon was down (success: no daemon listening) is released by
      // the reconcile loop once the daemon is back; short grace and sweep keep the run short.
      gc: { graceSeconds: 1, intervalSeconds: 1 },
      network: { subnet: testSubnet(), bridge, forwarding: false },
      // It runs in the host's namespace: the node's nftables are not its to own.
      masquerade: { enabled: false },
      server: { httpPort: 0 },
      logLevel: "info",
    }),
  );
  const daemon = new DaemonProcess(`${dir}/config.json`, socket, `${dir}/daemon.log`);
  const report: ChaosReport = {
    options: {
      pods: options.pods,
      concurrency: options.concurrency,
      kills: options.kills,
      apiOutageSeconds: options.apiOutageSeconds,
    },
    durationMs: 0,
    adds: { ok: 0, tryAgainLater: 0, other: 0 },
    podsGivenUp: 0,
    dels: { ok: 0, failed: 0 },
    kills: 0,
    duplicateAddresses: [],
    reassignedDuringDel: 0,
    leaked: { allocations: [], records: [], hostLinks: [] },
    violations: [],
    ok: false,
  };
  const namespaces = new Set<string>();
  try {
    await daemon.start();
    const { shim } = await install(installUnder(dir, socket));
    const conf = netconf("1.0.0");
    // address → the pod that got it, and its namespace (to look at its interface).
    const active = new Map<string, { id: string; ns: string }>();
    let done = false;

    const shimRun = (env: Record<string, string>) => runShimAt(shim, env, conf);

    /**
     * What a runtime has for a pod: the pod in the API (bound to the node), its namespace, and
     * the CNI environment naming both (with the UID the API gave the pod).
     */
    const sandbox = async (id: string, nsName: string) => {
      const created = api.store.create(PODS, "default", {
        metadata: { name: `pod-${id}`, namespace: "default" },
        spec: { nodeName: node, containers: [{ name: "c", image: "none" }] },
      } as Pod as never);
      await run("ip", "netns", "add", nsName);
      namespaces.add(nsName);
      const ns = { path: `/var/run/netns/${nsName}` };
      const pod = { name: `pod-${id}`, uid: String(created.metadata?.uid) };
      return { ns, env: (command: string) => cniEnv(command, ns, id, "eth0", pod) };
    };

    const cycle = async (n: number) => {
      const pod = `p${n}-${token}`;
      const id = `chaos${n}x${token}`;
      const nsName = `fyc-${token}-${n}`;
      const { env } = await sandbox(id, nsName);
      let address: string | undefined;
      for (let attempt = 0; attempt < 60 && !address; attempt++) {
        const out = await shimRun(env("ADD"));
        if (out.code === 0) {
          report.adds.ok++;
          address =
            String((out.json as { ips: { address: string }[] }).ips[0].address).split("/")[0];
        } else if (out.json?.code === CNI_ERROR.TRY_AGAIN_LATER) {
          report.adds.tryAgainLater++;
          await sleep(between(50, 250));
        } else {
          report.adds.other++;
          report.violations.push(`${pod}: ADD answered ${out.stdout.trim() || out.stderr.trim()}`);
          break;
        }
      }
      if (address) {
        const holder = active.get(address);
        if (holder && holder.id !== id) {
          // The earlier holder's DEL is still being retried (the daemon was killed during it).
          // A duplicate is two live interfaces with one address: look at the earlier one.
          const still = await run("ip", "-n", holder.ns, "-o", "addr", "show", "dev", "eth0")
            .then((out) => out.includes(` ${address}/`), () => false);
          if (still) report.duplicateAddresses.push(`${address}: ${holder.id} and ${id}`);
          else report.reassignedDuringDel++;
        }
        active.set(address, { id, ns: nsName });
      } else if (!report.violations.some((v) => v.startsWith(`${pod}:`))) {
        report.podsGivenUp++;
      }
      await sleep(between(0, 200));
      for (let attempt = 0;; attempt++) {
        const out = await shimRun(env("DEL"));
        if (out.code === 0) {
          report.dels.ok++;
          break;
        }
        report.dels.failed++;
        if (out.json?.code !== CNI_ERROR.TRY_AGAIN_LATER || attempt > 200) {
          report.violations.push(`${pod}: DEL answered ${out.stdout.trim()}`);
          if (attempt > 200) break;
        }
        await sleep(between(50, 250));
      }
      if (address && active.get(address)?.id === id) active.delete(address);
      await run("ip", "netns", "del", nsName);
      namespaces.delete(nsName);
      api.store.remove(PODS, "default", `pod-${id}`);
    };

    const started = performance.now();
    let next = 0;
    const workers = Array.from({ length: options.concurrency }, async () => {
      while (next < options.pods) await cycle(next++);
    });

    // Kills spread over the churn by progress (kill k once k/(kills+1) of the pods have started,
    // at a random moment after), so every one of them lands while pods churn, however fast
    // they go.
    const killer = (async () => {
      while (!done && report.kills < options.kills) {
        const at = Math.floor(options.pods * (report.kills + 1) / (options.kills + 1));
        while (!done && next < at) await sleep(20);
        await sleep(between(0, 300));
        if (done) break;
        await daemon.kill();
        report.kills++;
        log(`killed the daemon (${report.kills}/${options.kills})`);
        await sleep(between(0, 300));
        await daemon.start();
      }
    })();

    // Pods plugged before the outage and held through it: they must keep passing CHECK.
    const sentinels = async (n: number) => {
      const out: {
        id: string;
        ns: { path: string };
        env: (c: string) => Record<string, string>;
      }[] = [];
      for (let i = 0; i < n; i++) {
        const id = `sentinel${i}x${token}`;
        const { ns, env } = await sandbox(id, `fyc-${token}-s${i}`);
        for (let attempt = 0; attempt < 60; attempt++) {
          const add = await shimRun(env("ADD"));
          if (add.code === 0) break;
          if (add.json?.code !== CNI_ERROR.TRY_AGAIN_LATER) {
            report.violations.push(`${id}: ADD answered ${add.stdout.trim()}`);
            break;
          }
          await sleep(between(50, 250));
        }
        out.push({ id, ns, env });
      }
      return out;
    };

    const outage = (async () => {
      if (options.apiOutageSeconds <= 0) return;
      await sleep(1500);
      const held = await sentinels(3);
      const ready = () =>
        unixRequest(socket, "GET", READYZ_PATH, undefined, AbortSignal.timeout(1000))
          .then((r) => r.status === 200, () => false);
      log(`API stand-in paused for ${options.apiOutageSeconds} s`);
      await api.pause();
      const result = {
        seconds: options.apiOutageSeconds,
        readyWentFalse: false,
        readyCameBack: false,
        checks: 0,
        checksPassed: true,
      };
      const until = Date.now() + options.apiOutageSeconds * 1000;
      while (Date.now() < until) {
        if (!(await ready())) result.readyWentFalse = true;
        for (const p of held) {
          const out = await shimRun(p.env("CHECK"));
          // The daemon may be between a kill and its restart: that answer is code 11.
          if (out.json?.code === CNI_ERROR.TRY_AGAIN_LATER) continue;
          result.checks++;
          if (out.code !== 0) {
            result.checksPassed = false;
            report.violations.push(
              `${p.id}: CHECK during the API outage answered ${out.stdout.trim()}`,
            );
          }
        }
        await sleep(200);
      }
      await api.resume();
      log("API stand-in back");
      const deadline = Date.now() + 30_000;
      while (Date.now() < deadline && !result.readyCameBack) {
        result.readyCameBack = await ready();
        if (!result.readyCameBack) await sleep(100);
      }
      for (const p of held) {
        for (let attempt = 0; attempt < 200; attempt++) {
          const del = await shimRun(p.env("DEL"));
          if (del.code === 0) break;
          await sleep(between(50, 250));
        }
        // As a runtime does after DEL: the namespace and the pod go.
        const nsName = p.ns.path.split("/").pop()!;
        await run("ip", "netns", "del", nsName);
        namespaces.delete(nsName);
        api.store.remove(PODS, "default", `pod-${p.id}`);
      }
      report.apiOutage = result;
      if (!result.readyCameBack) {
        report.violations.push("readiness did not come back after the API outage");
      }
      if (!result.readyWentFalse && options.apiOutageSeconds > 3) {
        report.violations.push("readiness stayed true while the API was gone");
      }
      if (result.checks === 0) report.violations.push("no CHECK ran during the API outage");
    })();

    await Promise.all(workers);
    done = true;
    await Promise.all([killer, outage]);
    report.durationMs = Math.round(performance.now() - started);
    // The daemon's own start-up reconcile and its reconcile loop are part of the guarantee: one
    // clean restart first, then up to 30 s for the loop to release what DELs answered while the
    // daemon was down left behind (their pods and namespaces are gone).
    await daemon.kill();
    await daemon.start();
    const leaks = async () => ({
      allocations: await fileNames(`${stateDir}/ipam`),
      records: await fileNames(`${stateDir}/attachments`),
      hostLinks: (await bridgePorts(bridge)).filter((l) => l.startsWith(HOST_LINK_PREFIX)),
    });
    const settle = Date.now() + 30_000;
    report.leaked = await leaks();
    while (
      Date.now() < settle &&
      report.leaked.allocations.length + report.leaked.records.length +
            report.leaked.hostLinks.length > 0
    ) {
      await sleep(250);
      report.leaked = await leaks();
    }
    report.ok = report.violations.length === 0 && report.duplicateAddresses.length === 0 &&
      report.adds.other === 0 && report.leaked.allocations.length === 0 &&
      report.leaked.records.length === 0 && report.leaked.hostLinks.length === 0;
    if (!report.ok) log(`daemon log: ${dir}/daemon.log (kept)`);
    return report;
  } finally {
    await daemon.stop().catch(() => daemon.kill());
    await api.stop();
    for (const ns of namespaces) await run("ip", "netns", "del", ns).catch(() => {});
    await removeBridge(bridge);
    if (report.ok) await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("chaos: needs root (it plugs real network namespaces)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, {
    string: ["pods", "concurrency", "kills", "api-outage", "out"],
    default: {
      pods: "200",
      concurrency: "20",
      kills: "12",
      "api-outage": "30",
      out: "bench/results/chaos.json",
    },
  });
  const report = await runChaos({
    pods: Number(flags.pods),
    concurrency: Number(flags.concurrency),
    kills: Number(flags.kills),
    apiOutageSeconds: Number(flags["api-outage"]),
    log: (line) => console.error(`chaos: ${line}`),
  });
  const text = JSON.stringify({ date: new Date().toISOString(), ...report }, null, 2);
  console.log(text);
  if (flags.out) await Deno.writeTextFile(flags.out, text + "\n");
  Deno.exit(report.ok ? 0 : 1);
}
