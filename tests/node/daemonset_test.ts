// `deno task test:node`: Ferry installed the way an operator installs it. The image is built here
// (`deploy/image.ts`, no registry), imported into the node's containerd, and `kubectl apply -k`
// of the test node's overlay (tests/node/overlay: deploy/ with the node's CNI directories and the
// local image) creates the CRDs, RBAC, config, default pool and DaemonSet. This cluster runs no
// controller-manager or scheduler, so the test does their part: it creates the pod the DaemonSet
// controller would (the template, bound to kl-node1, owned by the DaemonSet) and the ConfigMap
// kube-root-ca.crt the root-CA publisher would. Then the install step puts the shim (with its own
// Deno) and the conflist on the host, the daemon becomes ready, and busybox pods created with
// kubectl get Ferry's addresses from the pool, reach each other, and `kubectl exec` works. Then a
// rolling upgrade to a new image tag (pods keep talking; a pod created while no daemon runs
// starts once the new one is up), and the uninstall (`kubectl delete -k`, `cni/uninstall.ts` on
// the node) after which nothing of Ferry is left. Needs root, /opt/realkubelet, /opt/realk8s and
// debootstrap; skipped (and said) otherwise.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";
import { run, uniqueToken } from "../../daemon/dev/netns.ts";
import { eventually } from "../integration/_cluster.ts";
import {
  applyPod,
  KUBECONFIG,
  kubectl,
  NODE_READY,
  removePortmapChains,
  REPO,
  sh,
  TOOLS,
} from "../../daemon/dev/realkubelet.ts";
import { buildRootfs, packOci } from "../../deploy/image.ts";

const HAVE_DEBOOTSTRAP = await Deno.stat("/usr/sbin/debootstrap").then(() => true, () => false);
const READY = NODE_READY && HAVE_DEBOOTSTRAP;
const IMAGE = "localhost/ferry:dev";
const UPGRADED = "localhost/ferry:dev2";
const POOL = "10.247.0.0/16";
const HOST_BIN = "/opt/realkubelet/cni/bin";
const HOST_CONF = "/opt/realkubelet/cni/net.d";
const CTR = ["-a", "/run/realkubelet/containerd.sock", "-n", "k8s.io"];

/** Waits (every 0.5 s: each probe runs kubectl) until `cond` holds, a failing probe counting as not yet. */
const until = (what: string, ms: number, cond: () => Promise<boolean>) =>
  eventually(() => cond().catch(() => false), what, ms, 500);

async function buildAndImport(): Promise<void> {
  const tmp = await Deno.makeTempDir({ prefix: "ferry-image-test-" });
  try {
    await buildRootfs(`${tmp}/rootfs`, "http://deb.debian.org/debian", () => {});
    await packOci(`${tmp}/rootfs`, IMAGE, `${tmp}/ferry.tar`, tmp);
    await run("ctr", ...CTR, "images", "import", `${tmp}/ferry.tar`);
  } finally {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}

/** The pod the DaemonSet controller and the scheduler would make for kl-node1. */
async function daemonSetPod(): Promise<string> {
  const ds = JSON.parse(
    await kubectl("get", "daemonset", "ferry", "-n", "kube-system", "-o", "json"),
  );
  const name = `ferry-${uniqueToken().slice(0, 5)}`;
  const pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "kube-system",
      labels: ds.spec.template.metadata.labels,
      ownerReferences: [{
        apiVersion: "apps/v1",
        kind: "DaemonSet",
        name: "ferry",
        uid: ds.metadata.uid,
        controller: true,
        blockOwnerDeletion: true,
      }],
    },
    spec: { ...ds.spec.template.spec, nodeName: "kl-node1" },
  };
  const file = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(file, JSON.stringify(pod));
    await kubectl("create", "-f", file);
  } finally {
    await Deno.remove(file);
  }
  return name;
}

/** True once the kube-system pod `name` is Ready. */
async function ready(name: string): Promise<boolean> {
  return (await kubectl(
    "get",
    "pod",
    name,
    "-n",
    "kube-system",
    "-o",
    'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
  )).trim() === "True";
}

async function podIp(name: string, ns = "default"): Promise<string> {
  return (await kubectl("get", "pod", name, "-n", ns, "-o", "jsonpath={.status.podIP}")).trim();
}

Deno.test({
  name:
    "real kubelet: kubectl apply -k installs Ferry from an image built here; its pod installs the shim and conflist on the host; kubectl-created pods get pool addresses, reach each other, exec works; a rolling upgrade keeps them talking and serves a pod created meanwhile; uninstall leaves nothing",
  ignore: !READY,
  fn: async () => {
    const token = uniqueToken().slice(0, 6);
    const pods = [`kl-d1${token}`, `kl-d2${token}`];
    const tablesBefore = await run("nft", "list", "tables").catch(() => "");
    let ferryPod: string | undefined;
    try {
      await sh(`${TOOLS}/use-cni.sh`, "none");
      await sh(`${TOOLS}/start.sh`);
      // The daemon sees the runtime's namespaces through a HostToContainer mount of /run/netns,
      // which the runtime accepts only from a shared or slave mount. On systemd hosts / is shared;
      // on this machine it is private, so /run/netns becomes its own shared mount, as `ip netns`
      // makes it.
      await Deno.mkdir("/run/netns", { recursive: true });
      if (!(await run("findmnt", "-n", "/run/netns").catch(() => ""))) {
        await run("mount", "--bind", "/run/netns", "/run/netns");
      }
      await run("mount", "--make-shared", "/run/netns");
      await buildAndImport();
      // What kube-controller-manager's root CA publisher would have made.
      await kubectl(
        "create",
        "configmap",
        "kube-root-ca.crt",
        "-n",
        "kube-system",
        "--from-file=ca.crt=/opt/realk8s/pki/ca.crt",
      ).catch(() => "");
      // The IPPool CRD must be established before the pool: apply again until all is created.
      await until("kubectl apply -k succeeds", 60_000, async () => {
        await kubectl("apply", "-k", `${REPO}tests/node/overlay`);
        return true;
      });
      ferryPod = await daemonSetPod();
      const pod = ferryPod;
      await until("the Ferry pod is ready", 120_000, () => ready(pod)).catch(async (e) => {
        // What an operator would look at: the pod's events and both containers' logs.
        const look = (...args: string[]) => kubectl(...args).catch((x) => String(x));
        throw new Error(
          `${e.message}\n${await look("describe", "pod", "-n", "kube-system", pod)}\n` +
            `install-cni: ${await look(
              "logs",
              "-n",
              "kube-system",
              pod,
              "-c",
              "install-cni",
            )}\n` +
            `ferry: ${await look("logs", "-n", "kube-system", pod, "-c", "ferry", "--tail=30")}`,
        );
      });
      // The install step's files on the host: the wrapper, Deno beside it, the bundle, the
      // conflist naming the wrapper and chaining portmap.
      for (const f of ["ferry", "ferry-deno", "ferry-shim.js"]) {
        assert((await Deno.stat(`${HOST_BIN}/${f}`)).isFile, f);
      }
      // The conflist is published by the daemon once it is ready (staged by the install step).
      await until(
        "the daemon published the conflist",
        30_000,
        () => Deno.stat(`${HOST_CONF}/10-ferry.conflist`).then(() => true, () => false),
      );
      const conflist = JSON.parse(await Deno.readTextFile(`${HOST_CONF}/10-ferry.conflist`));
      assertEquals(conflist.plugins.map((p: { type: string }) => p.type), ["ferry", "portmap"]);
      assert(
        (await Deno.readTextFile(`${HOST_BIN}/ferry`)).includes(`'${HOST_BIN}/ferry-deno'`),
        "the wrapper runs the Deno installed beside it",
      );
      for (const name of pods) {
        await applyPod(name);
      }
      await kubectl(
        "wait",
        "--for=condition=Ready",
        "--timeout=120s",
        ...pods.map((p) => `pod/${p}`),
      )
        .catch(async (e) => {
          const events = await kubectl("describe", "pod", pods[0]).catch((x) => String(x));
          const log = await kubectl("logs", "-n", "kube-system", pod, "-c", "ferry", "--tail=20")
            .catch((x) => String(x));
          throw new Error(`${e.message}\n${events.slice(events.indexOf("Events:"))}\n${log}`);
        });
      const ips = await Promise.all(pods.map((p) => podIp(p)));
      for (const ip of ips) assert(cidrContains(parseCidr(POOL), parseIp(ip)), `${ip} in ${POOL}`);
      assert(ips[0] !== ips[1]);
      await kubectl("exec", pods[0], "--", "ping", "-c", "1", "-W", "3", ips[1]);
      // And the host: the node's own address (its InternalIP), through the bridge's gateway.
      const nodeIp = (await kubectl(
        "get",
        "node",
        "kl-node1",
        "-o",
        'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}',
      )).trim();
      await kubectl("exec", pods[1], "--", "ping", "-c", "1", "-W", "3", nodeIp);
      assertEquals(
        (await kubectl("exec", pods[1], "--", "echo", "exec works")).trim(),
        "exec works",
      );
      // The daemon recorded the block it claimed for this node in the API.
      const blocks = JSON.parse(await kubectl("get", "ipblocks.ferry.dev", "-o", "json"));
      assert(
        blocks.items.some((b: { spec: { node: string } }) => b.spec.node === "kl-node1"),
        "a block owned by kl-node1",
      );

      // A rolling upgrade to a new image, as the DaemonSet controller does it with
      // maxUnavailable 1: the old pod goes, then a pod of the new template comes. Plugged pods
      // keep their network throughout, and a pod created while no daemon runs starts once the
      // new one is up (its ADD answered 11 meanwhile, retried by the kubelet).
      await run("ctr", ...CTR, "images", "tag", "--force", IMAGE, UPGRADED);
      await kubectl(
        "set",
        "image",
        "daemonset/ferry",
        "-n",
        "kube-system",
        `ferry=${UPGRADED}`,
        `install-cni=${UPGRADED}`,
      );
      const pinging = kubectl(
        "exec",
        pods[0],
        "--",
        "ping",
        "-c",
        "40",
        "-i",
        "0.25",
        "-W",
        "1",
        ips[1],
      );
      await kubectl("delete", "pod", "-n", "kube-system", pod, "--wait=true", "--timeout=60s");
      ferryPod = undefined;
      const during = `kl-d3${token}`;
      pods.push(during);
      await applyPod(during);
      await new Promise((r) => setTimeout(r, 3000)); // its sandbox meets no daemon
      ferryPod = await daemonSetPod();
      const upgraded = ferryPod;
      assertEquals(
        (await kubectl(
          "get",
          "pod",
          upgraded,
          "-n",
          "kube-system",
          "-o",
          "jsonpath={.spec.containers[0].image}",
        ))
          .trim(),
        UPGRADED,
      );
      await until("the upgraded Ferry pod is ready", 120_000, () => ready(upgraded));
      const pingOut = await pinging;
      assert(
        / 0% packet loss/.test(pingOut),
        `the pods' traffic went on during the upgrade:\n${pingOut}`,
      );
      await kubectl("wait", "--for=condition=Ready", "--timeout=120s", `pod/${during}`);
      const duringIp = await podIp(during);
      assert(cidrContains(parseCidr(POOL), parseIp(duringIp)) && !ips.includes(duringIp), duringIp);

      // Uninstall: the objects, then the node's clean-up command; nothing of Ferry stays.
      await kubectl("delete", "pod", "--wait=true", "--timeout=60s", ...pods);
      await kubectl("delete", "pod", "-n", "kube-system", upgraded, "--wait=true", "--timeout=60s");
      ferryPod = undefined;
      await kubectl(
        "delete",
        "-k",
        `${REPO}tests/node/overlay`,
        "--ignore-not-found",
        "--wait=true",
      );
      const removed = await sh(
        Deno.execPath(),
        "run",
        "--allow-all",
        "--frozen",
        `${REPO}cni/uninstall.ts`,
        `--config=${REPO}tests/node/overlay/config.json`,
        `--bin-dir=${HOST_BIN}`,
        `--conf-dir=${HOST_CONF}`,
      );
      for (const f of ["ferry", "ferry-deno", "ferry-shim.js"]) {
        assertEquals(await Deno.stat(`${HOST_BIN}/${f}`).then(() => true, () => false), false, f);
      }
      assertEquals(
        await Deno.stat(`${HOST_CONF}/10-ferry.conflist`).then(() => true, () => false),
        false,
      );
      assertEquals(
        await run("ip", "link", "show", "klferry0").then(() => true, () => false),
        false,
      );
      assert(!(await run("nft", "list", "tables")).includes("table inet ferry"), removed);
      assertEquals(await Deno.stat("/var/lib/ferry").then(() => true, () => false), false);
      assertEquals(await Deno.stat("/run/ferry").then(() => true, () => false), false);
    } finally {
      await kubectl("delete", "pod", "--ignore-not-found", "--wait=true", "--timeout=60s", ...pods)
        .catch(() => {});
      if (ferryPod) {
        await kubectl(
          "delete",
          "pod",
          "-n",
          "kube-system",
          ferryPod,
          "--wait=true",
          "--timeout=60s",
        )
          .catch(() => {});
      }
      await kubectl(
        "delete",
        "-k",
        `${REPO}tests/node/overlay`,
        "--ignore-not-found",
        "--wait=false",
      )
        .catch(() => {});
      await kubectl("delete", "ipblocks.ferry.dev", "--all", "--ignore-not-found").catch(() => {});
      await kubectl(
        "delete",
        "configmap",
        "kube-root-ca.crt",
        "-n",
        "kube-system",
        "--ignore-not-found",
      )
        .catch(() => {});
      // (containerd still runs here; stop.sh stops it)
      await run("ctr", ...CTR, "images", "rm", IMAGE, UPGRADED).catch(() => {});
      await sh(`${TOOLS}/stop.sh`, "--clean").catch(() => {});
      // What uninstalling leaves on a node (docs/install.md, "Uninstall"): the shim, its Deno and bundle,
      // the conflist, Ferry's bridge, its nftables table and state.
      for (const f of ["ferry", "ferry-deno", "ferry-shim.js"]) {
        await Deno.remove(`${HOST_BIN}/${f}`).catch(() => {});
      }
      await Deno.remove(`${HOST_CONF}/10-ferry.conflist`).catch(() => {});
      await run("ip", "link", "del", "klferry0").catch(() => {});
      if (!tablesBefore.includes("table inet ferry")) {
        await run("nft", "delete", "table", "inet", "ferry").catch(() => {});
      }
      await removePortmapChains(tablesBefore);
      await Deno.remove("/var/lib/ferry", { recursive: true }).catch(() => {});
      await Deno.remove("/run/ferry", { recursive: true }).catch(() => {});
    }
  },
});

if (!READY) {
  console.log(
    `test:node (DaemonSet) skipped: needs root, /opt/realkubelet, ${KUBECONFIG} and debootstrap`,
  );
}
