/**
 * The real kubelet node (`../shared/tools/realkubelet`: kubelet 1.26 and containerd on the
 * realk8s apiserver, node kl-node1), for `deno task test:node` and the benchmark's node run: where
 * its tools are, whether it is built, and running them.
 *
 * @module
 */
import { run } from "./netns.ts";

/** This checkout, for the tools that install Ferry from it. */
export const REPO: string = new URL("../../", import.meta.url).pathname;
/** The realk8s apiserver's admin kubeconfig. */
export const KUBECONFIG = "/opt/realk8s/kubeconfig";
const exists = (p: string) => Deno.stat(p).then(() => true, () => false);
/** The realkubelet tools: shared/tools/realkubelet beside the project, or FERRY_REALKUBELET_TOOLS. */
export const TOOLS: string | undefined = await (async () => {
  for (
    const dir of [
      Deno.env.get("FERRY_REALKUBELET_TOOLS"),
      `${REPO}../shared/tools/realkubelet`,
      "/work/shared/tools/realkubelet",
    ]
  ) {
    if (dir && await exists(`${dir}/start.sh`)) return dir;
  }
  return undefined;
})();
/** Root, the tools, a built node and the apiserver's kubeconfig. */
export const NODE_READY: boolean = Deno.uid() === 0 && !!TOOLS &&
  await exists("/opt/realkubelet/bin/kubelet") && await exists(KUBECONFIG);

/**
 * Runs `cmd` with the node's environment and returns its output (stdout and stderr).
 * @throws Error with the output when it fails.
 */
export async function sh(cmd: string, ...args: string[]): Promise<string> {
  const out = await new Deno.Command(cmd, {
    args,
    // NODE names the tools' node; npm (which CI runs Deno through) sets NODE to its node binary.
    env: { KUBECONFIG, NODE: "kl-node1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${cmd} ${args.join(" ")} failed:\n${text}`);
  return text;
}

/** `kubectl` on the realk8s apiserver (see {@link sh}). */
export const kubectl = (...args: string[]): Promise<string> => sh("kubectl", ...args);

/**
 * Runs `fn` with the realk8s apiserver up: started (`/opt/realk8s/start.sh`) when it does not
 * answer, and stopped again afterwards only then, so a server someone else started stays.
 */
export async function withRealApiserver<T>(fn: () => Promise<T>): Promise<T> {
  const wasUp = await kubectl("get", "--raw", "/readyz").then(() => true, () => false);
  if (!wasUp) await sh("/opt/realk8s/start.sh");
  try {
    return await fn();
  } finally {
    if (!wasUp) await sh("/opt/realk8s/stop.sh").catch(() => {});
  }
}

/**
 * portmap leaves its top-level chains behind on a node (as on any cluster); on this machine they
 * go after a test or benchmark, with the nat tables iptables-nft made for them if there were none
 * before (`tablesBefore`: `nft list tables` from before).
 */
export async function removePortmapChains(tablesBefore: string): Promise<void> {
  for (const tool of ["iptables", "ip6tables"]) {
    const ipt = (...args: string[]) => run(tool, "-t", "nat", ...args).catch(() => {});
    await ipt(
      "-D",
      "PREROUTING",
      "-m",
      "addrtype",
      "--dst-type",
      "LOCAL",
      "-j",
      "CNI-HOSTPORT-DNAT",
    );
    await ipt("-D", "OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT");
    await ipt(
      "-D",
      "POSTROUTING",
      "-m",
      "comment",
      "--comment",
      "CNI portfwd requiring masquerade",
      "-j",
      "CNI-HOSTPORT-MASQ",
    );
    for (const chain of ["CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK"]) {
      await ipt("-F", chain);
      await ipt("-X", chain);
    }
  }
  for (const table of ["ip nat", "ip6 nat"]) {
    if (!tablesBefore.includes(`table ${table}\n`) && !tablesBefore.endsWith(`table ${table}`)) {
      await run("nft", "delete", "table", ...table.split(" ")).catch(() => {});
    }
  }
}

/** Creates the tools' busybox pod `name` (`pod.sh`: namespace default, bound to kl-node1). */
export async function applyPod(name: string): Promise<void> {
  const yaml = await sh(`${TOOLS}/pod.sh`, name);
  const file = await Deno.makeTempFile({ suffix: ".yaml" });
  try {
    await Deno.writeTextFile(file, yaml);
    await kubectl("apply", "-f", file);
  } finally {
    await Deno.remove(file);
  }
}
