/**
 * The API under test: the embedded stand-in by default, or a real kube-apiserver when
 * `FERRY_TEST_KUBECONFIG` names its kubeconfig. The same test files run against both; objects get
 * unique names and are removed by the tests.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { KubeClient } from "../../../daemon/k8s/client.ts";
import { loadKubeconfig } from "../../../daemon/k8s/kubeconfig.ts";
import { PODS } from "../../../daemon/k8s/resources.ts";
import { HttpTransport } from "../../../daemon/k8s/transport.ts";
import { KubeStandin } from "../../../daemon/dev/kube_standin/server.ts";
import { uniqueToken } from "../../../daemon/dev/netns.ts";

/** The kubeconfig of a real API server, when the real-server suite runs. */
export const REAL_KUBECONFIG = Deno.env.get("FERRY_TEST_KUBECONFIG");

/** One API target for one test. */
export interface KubeTarget {
  /** A kubeconfig file for it. */
  kubeconfig: string;
  /** A client on it. */
  client: KubeClient;
  /** The client's transport (for requests the client does not make). */
  transport: HttpTransport;
  /** The stand-in, when that is the target (its hooks). */
  standin?: KubeStandin;
  /** A unique token for object names. */
  id: string;
  /** Waits (real) or forces (stand-in) etcd compaction past `oldRv`: exact lists of it answer 410. */
  expireList(oldRv: string): Promise<void>;
  /**
   * Waits for (real) or forces (stand-in) the watch cache to drop `oldRv`: watches from it get the
   * in-stream 410. A real watch cache keeps at least 100 events per type and all of the last 75 s,
   * so this waits 76 s and then makes 110 pod events.
   */
  expireWatch(oldRv: string): Promise<void>;
  /** Stops the API server (real: /opt/realk8s/stop.sh; stand-in: pause). */
  stopApi(): Promise<void>;
  /** Starts it again (real: /opt/realk8s/start.sh; stand-in: resume on the same port). */
  startApi(): Promise<void>;
  /**
   * Freezes the API server: connections are accepted and requests never answered until
   * {@link KubeTarget.thawApi} (real: SIGSTOP to the apiserver; stand-in: every request held).
   */
  freezeApi(): Promise<void>;
  /** Lets a frozen API server answer again (real: SIGCONT; stand-in: held requests go on). */
  thawApi(): Promise<void>;
}

/** A valid pod (the real server validates containers) bound to `nodeName`. */
export function testPod(name: string, nodeName: string, extra: Partial<Pod["metadata"]> = {}): Pod {
  return {
    metadata: { name, namespace: "default", ...extra },
    spec: {
      nodeName,
      containers: [{ name: "c", image: "registry.invalid/pause:3.9" }],
      terminationGracePeriodSeconds: 30,
    },
  };
}

async function sh(cmd: string, ...args: string[]): Promise<void> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(
      `${cmd} failed: ${new TextDecoder().decode(out.stdout)}${
        new TextDecoder().decode(out.stderr)
      }`,
    );
  }
}

async function until(ms: number, done: () => Promise<boolean>, pauseMs = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, pauseMs));
  }
}

/** Deletes pods right away (gracePeriodSeconds=0), ignoring those already gone. */
export async function removePods(client: KubeClient, names: string[]): Promise<void> {
  await Promise.all(
    names.map((n) => client.delete(PODS, "default", n, { gracePeriodSeconds: 0 }).catch(() => {})),
  );
}

/**
 * Runs `fn` against the target.
 *
 * @example
 * ```ts
 * Deno.test("…", () => withKube(async (k) => { await k.client.create(PODS, testPod(`p-${k.id}`, "n")); }));
 * ```
 */
export async function withKube<T>(fn: (t: KubeTarget) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "ferry-kube-" });
  const id = uniqueToken();
  let standin: KubeStandin | undefined;
  let transport: HttpTransport | undefined;
  try {
    let kubeconfig = REAL_KUBECONFIG;
    if (!kubeconfig) {
      standin = await KubeStandin.start({ token: `tok-${id}`, bookmarkIntervalMs: 100 });
      kubeconfig = `${dir}/kubeconfig`;
      await Deno.writeTextFile(kubeconfig, standin.kubeconfig());
    }
    transport = new HttpTransport(await loadKubeconfig(kubeconfig));
    const client = new KubeClient(transport);
    const api = standin;
    return await fn({
      kubeconfig,
      client,
      transport,
      standin,
      id,
      async stopApi() {
        if (api) return await api.pause();
        // stop.sh sends SIGTERM and waits 10 s; a draining apiserver can keep serving open watches
        // longer than that, so make sure the process is gone (as after a crash).
        const pid = (await Deno.readTextFile("/opt/realk8s/run/apiserver.pid").catch(() => ""))
          .trim();
        await sh("/opt/realk8s/stop.sh");
        if (pid) {
          await sh(
            "/bin/sh",
            "-c",
            `kill -9 ${pid} 2>/dev/null; while kill -0 ${pid} 2>/dev/null; do sleep 0.1; done; true`,
          );
        }
      },
      async startApi() {
        if (api) return await api.resume();
        await sh("/opt/realk8s/start.sh", "--etcd-compaction-interval=20s");
      },
      async freezeApi() {
        if (api) return api.delayResponses(3_600_000);
        await sh("/bin/sh", "-c", "kill -STOP $(cat /opt/realk8s/run/apiserver.pid)");
      },
      async thawApi() {
        if (api) return api.delayResponses(0);
        await sh("/bin/sh", "-c", "kill -CONT $(cat /opt/realk8s/run/apiserver.pid)");
      },
      async expireList(oldRv: string) {
        if (api) return api.compact();
        // A real server compacts etcd on its own (start it with --etcd-compaction-interval=20s).
        await until(120_000, async () => {
          try {
            await client.list(PODS, {
              namespace: "default",
              resourceVersion: oldRv,
              resourceVersionMatch: "Exact",
              limit: 1,
            });
            return false;
          } catch (e) {
            if ((e as { status?: number }).status === 410) return true;
            throw e;
          }
        });
      },
      async expireWatch(oldRv: string) {
        if (api) return api.expireWatchCache();
        // Events younger than 75 s are never evicted; after that, churn until the cache (whose
        // capacity earlier bursts may have grown) has dropped the old version.
        await new Promise((r) => setTimeout(r, 76_000));
        const churn = `churn-${id}`;
        await client.create(PODS, testPod(churn, `churn-node-${id}`));
        try {
          await until(300_000, async () => {
            for (let i = 0; i < 100; i++) {
              await client.patchMerge(PODS, "default", churn, {
                metadata: { labels: { i: String(i) } },
              });
            }
            const abort = new AbortController();
            const events = await client.watch(PODS, {
              namespace: "default",
              resourceVersion: oldRv,
              signal: abort.signal,
            });
            const first = await events.next();
            abort.abort();
            return first.value?.type === "ERROR";
          }, 0);
        } finally {
          await removePods(client, [churn]);
        }
      },
    });
  } finally {
    transport?.close();
    await standin?.stop();
    await Deno.remove(dir, { recursive: true });
  }
}
