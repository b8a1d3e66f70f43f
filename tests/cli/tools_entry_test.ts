// `kubectl ferry ipam check` and `kubectl ferry policy explain` are today's tools: the same output
// and exit status as `deno task ipam-check` and `deno task policy-explain`, on the API stand-in.
import { assertEquals } from "deno-std/assert/mod.js";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { KubeStandin } from "../../daemon/dev/kube_standin/server.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";
import { KubeClient } from "../../daemon/k8s/client.ts";
import { loadKubeconfig } from "../../daemon/k8s/kubeconfig.ts";
import { NETWORK_POLICIES, NODES, PODS } from "../../daemon/k8s/resources.ts";
import { HttpTransport } from "../../daemon/k8s/transport.ts";

const file = (p: string) => new URL(`../../${p}`, import.meta.url).pathname;

async function run(script: string, args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "--frozen", "--quiet", file(script), ...args],
    stdout: "piped",
    stderr: "piped",
    env: { KUBECONFIG: "" },
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

async function withCluster(fn: (kubeconfig: string) => Promise<void>) {
  const api = await KubeStandin.start();
  try {
    await withTempDir(async (dir) => {
      const kubeconfig = `${dir}/kubeconfig`;
      await Deno.writeTextFile(kubeconfig, api.kubeconfig());
      const transport = new HttpTransport(await loadKubeconfig(kubeconfig));
      const client = new KubeClient(transport);
      try {
        await client.create<Node>(NODES, {
          metadata: { name: "n1" },
          spec: { podCIDR: "10.1.0.0/24", podCIDRs: ["10.1.0.0/24"] },
        });
        const pod = (name: string, ip: string, labels: Record<string, string>): Pod => ({
          metadata: { name, namespace: "default", labels },
          spec: { nodeName: "n1", containers: [{ name: "c", image: "i" }] },
          status: { phase: "Running", podIP: ip, podIPs: [{ ip }] },
        });
        await client.create(PODS, pod("web", "10.1.0.5", { app: "web" }));
        await client.create(PODS, pod("db", "10.1.0.6", { app: "db" }));
        await client.create(PODS, pod("twin", "10.1.0.6", { app: "twin" })); // db's address again
        await client.create<NetworkPolicy>(NETWORK_POLICIES, {
          metadata: { name: "db-from-web", namespace: "default" },
          spec: {
            podSelector: { matchLabels: { app: "db" } },
            ingress: [{
              from: [{ podSelector: { matchLabels: { app: "web" } } }],
              ports: [{ port: 5432, protocol: "TCP" }],
            }],
          },
        });
      } finally {
        transport.close();
      }
      await fn(kubeconfig);
    });
  } finally {
    await api.stop();
  }
}

Deno.test("kubectl ferry ipam check prints and exits as deno task ipam-check does", () =>
  withCluster(async (kubeconfig) => {
    for (const [json, cliJson] of [[[], []], [["--json"], ["-o", "json"]]]) {
      const tool = await run("daemon/tools/ipam_check.ts", ["--kubeconfig", kubeconfig, ...json]);
      const cli = await run("cli/main.ts", [
        "--kubeconfig",
        kubeconfig,
        "ipam",
        "check",
        ...cliJson,
      ]);
      assertEquals(tool.code, 1, `the address held twice is found:\n${tool.stdout}${tool.stderr}`);
      assertEquals([cli.code, cli.stdout, cli.stderr], [tool.code, tool.stdout, tool.stderr]);
    }
  }));

Deno.test("kubectl ferry policy explain prints and exits as deno task policy-explain does", () =>
  withCluster(async (kubeconfig) => {
    const questions = [
      { args: ["--pod", "default/db"], code: 0 },
      { args: ["--pod", "default/db", "--from", "default/web", "--port", "5432/TCP"], code: 0 },
      { args: ["--pod", "default/db", "--from", "default/twin", "--port", "5432"], code: 1 },
      { args: ["--pod", "default/nobody"], code: 2 },
    ];
    for (const q of questions) {
      const tool = await run("daemon/tools/policy_explain.ts", [
        "--kubeconfig",
        kubeconfig,
        ...q.args,
      ]);
      const cli = await run("cli/main.ts", [
        "--kubeconfig",
        kubeconfig,
        "policy",
        "explain",
        ...q.args,
      ]);
      assertEquals(tool.code, q.code, `${q.args.join(" ")}:\n${tool.stdout}${tool.stderr}`);
      assertEquals(
        [cli.code, cli.stdout, cli.stderr],
        [tool.code, tool.stdout, tool.stderr],
        q.args.join(" "),
      );
    }
  }));

Deno.test("kubectl ferry refuses an unknown command or flag with exit status 2 and the usage", async () => {
  for (const args of [[], ["frobnicate"], ["status", "--bogus"], ["status", "-o", "yaml"]]) {
    const r = await run("cli/main.ts", args);
    assertEquals(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assertEquals(r.stdout, "");
    assertEquals(r.stderr.includes("usage: kubectl ferry COMMAND"), true, r.stderr);
  }
});
