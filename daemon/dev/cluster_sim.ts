/**
 * A simulated cluster on one machine, for the tests and the demo: every node is a network
 * namespace with its own Ferry daemon process (started inside it with `ip netns exec`), its own
 * bridge, state directory and socket, and its shim installed as a runtime would have it. The nodes
 * share an underlay: a bridge in a namespace of its own, with one veth per node. One more
 * namespace, "outside", sits on the underlay as every node's default gateway and holds an address
 * that plays the internet. The API stand-in runs in this process on the host's loopback; each node
 * reaches it through a forwarder listening on 127.0.0.1 inside that node's namespace (the
 * listening socket is made with the JS thread switched into the namespace). Node objects carry
 * their podCIDRs and underlay addresses, as a controller-manager and kubelet would set them.
 *
 * Only the simulation's own namespaces carry traffic; everything is removed afterwards, also when
 * the body throws.
 *
 * @module
 */
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import { install, installUnder } from "../../cni/install.ts";
import { IPBLOCKS, IPPOOLS, LEASES, NODES, PODS } from "../k8s/resources.ts";
import { nodeLeaseName } from "../cluster/node_identity.ts";
import type { IpBlockObject, IpPoolObject } from "../ipam/ip_pools.ts";
import { installMultiPolicyCrd, installNadCrd, installPoolCrds } from "./crds.ts";
import { Libc } from "../net/netlink/libc.ts";
import { cniEnv, netconf, runShimAt, type ShimRun } from "./harness.ts";
import { KubeStandin } from "./kube_standin/server.ts";
import { KubeClient } from "../k8s/client.ts";
import { loadKubeconfig } from "../k8s/kubeconfig.ts";
import { HttpTransport } from "../k8s/transport.ts";
import { run, type TestNetns, uniqueToken } from "./netns.ts";
import { DaemonProcess, waitForDaemon } from "./daemon_process.ts";

/** One simulated node. */
export interface SimNode {
  /** Its Node name. */
  name: string;
  /** Its namespace. */
  ns: TestNetns;
  /** Its underlay address (the InternalIP). */
  address: string;
  /** Its pod range (spec.podCIDRs[0]). */
  podCIDR: string;
  /** Its IPv6 underlay address and pod range, on a dual-stack simulation. */
  v6?: { address: string; podCIDR: string };
  /** The daemon's socket. */
  socket: string;
  /** The installed shim. */
  shim: string;
  /** The daemon's log file. */
  log: string;
}

/** A plugged pod. */
export interface SimPod {
  /** Pod name (in `default`). */
  name: string;
  /** Its node. */
  node: SimNode;
  /** Its namespace. */
  ns: TestNetns;
  /** Its IPv4 address. */
  ip: string;
  /** Its IPv6 address, on a dual-stack simulation. */
  ip6?: string;
  /** The container ID of its sandbox. */
  containerId: string;
  /** The CNI result its ADD printed. */
  result?: Record<string, unknown>;
  /** Its pod's UID. */
  uid?: string;
}

/**
 * For the benchmark's floors: `harness` does everything {@link SimCluster.addPod} does but runs
 * `/bin/true` instead of the shim (the pod gets no address); `shimStart` runs the shim with
 * `CNI_COMMAND=VERSION` (a shim's cold start, no daemon work). Such pods are only removed from the
 * API, never DELeted.
 */
export type SimFloor = "harness" | "shimStart";

/** The running simulation. */
export interface SimCluster {
  /** The nodes. */
  nodes: SimNode[];
  /** The names of the Node objects of {@link SimOptions.nodeObjects}, in their order. */
  nodeObjects: string[];
  /** A client on the API the nodes use (the stand-in, or the real server given). */
  client: KubeClient;
  /** A kubeconfig file of that API, for tools run against the simulated cluster. */
  kubeconfig: string;
  /** The outside host. */
  outside: TestNetns;
  /** The address in `outside` that plays the internet. */
  internet: string;
  /**
   * Creates a pod bound to `node`, makes its namespace and plugs it through the node's shim; with
   * `retryFor` (ms), repeats ADD while it answers code 11, as a runtime does. Then writes its
   * addresses into its status, as the kubelet does.
   */
  addPod(
    node: SimNode,
    name: string,
    retryFor?: number,
    options?: {
      floor?: SimFloor;
      annotations?: Record<string, string>;
      labels?: Record<string, string>;
      ports?: { name: string; containerPort: number; protocol?: string }[];
    },
  ): Promise<SimPod>;
  /** Unplugs a pod (DEL through its node's shim) and removes it. */
  removePod(pod: SimPod): Promise<ShimRun>;
  /** Deletes a pod's object from the API at once, with no DEL (as when a runtime misses it). */
  deletePodObject(pod: SimPod): Promise<void>;
  /** Stops a node's daemon with SIGKILL (it stays down until {@link SimCluster.startDaemon}). */
  killDaemon(node: SimNode): Promise<void>;
  /** Starts a node's daemon again (not waiting for readiness). */
  startDaemon(node: SimNode): Promise<void>;
  /** Deletes a node from the API (its daemon keeps running). */
  deleteNode(node: SimNode): Promise<void>;
  /** Kills a node's daemon with SIGKILL and starts it again (not waiting for readiness). */
  killAndRestart(node: SimNode): Promise<void>;
  /**
   * Starts a second daemon that calls itself `node` (the same node name, another machine: its own
   * network namespace, state directory and socket, the same API), as a copied config or two hosts
   * of one hostname would; returns it as a node of its own (its shim, socket and log).
   */
  startImpostor(node: SimNode): Promise<SimNode>;
  /**
   * Changes a node's daemon configuration (`patch` over it, one level deep) and restarts the
   * daemon with SIGKILL, as an operator editing the ConfigMap of a crashing pod would.
   */
  reconfigure(node: SimNode, patch: Record<string, unknown>): Promise<void>;
  /**
   * Takes the API server away for `ms` (the stand-in pauses; a real server is stopped and started
   * again with /opt/realk8s/stop.sh and start.sh).
   */
  apiOutage(ms: number): Promise<void>;
  /** Gives a node created without podCIDRs its range, as the controller-manager would. */
  assignPodCIDR(node: SimNode): Promise<void>;
  /**
   * Creates a Node object no daemon runs for (`sim-<token>-<suffix>`, removed afterwards), as a
   * node in another zone, a typo or another test's leftover would look to the daemons; returns
   * its name.
   */
  addNodeObject(
    suffix: string,
    address: string,
    podCIDR?: string,
    annotations?: Record<string, string>,
  ): Promise<string>;
  /** Sets a Node's InternalIP in its status (as a kubelet would after the node's address changed). */
  setNodeAddress(name: string, address: string): Promise<void>;
  /**
   * Moves a simulated node to another underlay address: the new one on its interface, its Node's
   * InternalIP changed, then the old one removed (`node.address` follows).
   */
  readdressNode(node: SimNode, address: string): Promise<void>;
  /** The simulation's IPPool (with `pool`), and its CIDRs. */
  pool?: { name: string; cidrs: string[] };
  /** Each node's blocks in the API now (with `pool`), by node name. */
  blocks(): Promise<Map<string, string[]>>;
  /** Listens on TCP `port` inside `ns`; resolves to the source address of the first connection. */
  acceptOnce(
    ns: TestNetns,
    address: string,
    port: number,
  ): { source: Promise<string>; close(): void };
}

/** Options of the simulation. */
export interface SimOptions {
  /** How many nodes. */
  nodes: number;
  /** Extra daemon configuration (merged over the simulation's). */
  config?: Record<string, unknown>;
  /** Nodes (1-based) created without podCIDRs, as before the controller-manager assigns them. */
  withoutPodCIDRs?: number[];
  /** Every node gets an IPv6 underlay address and an IPv6 pod range too. */
  dualStack?: boolean;
  /**
   * A real API server to use (its kubeconfig file); without it an embedded stand-in is started.
   * Objects the simulation creates there are removed afterwards.
   */
  kubeconfig?: string;
  /**
   * Pool IPAM instead of podCIDRs: Ferry's CRDs are installed, an IPPool of the simulation's pod
   * range (a /16, and a /56 on dual stack) is created, the nodes get no podCIDRs, and the daemons
   * run `ipam.mode` auto (which picks the pool) unless `config` says otherwise.
   */
  pool?: { blockSize?: { ipv4?: number; ipv6?: number } };
  /**
   * Node objects no daemon runs for, created before the daemons start (see
   * {@link SimCluster.addNodeObject}); pod range `<the simulation's pod net>.<podRange>.0/24`.
   */
  nodeObjects?: {
    suffix: string;
    address: string;
    podRange?: number;
    annotations?: Record<string, string>;
  }[];
  /**
   * Installs the NetworkAttachmentDefinition and MultiNetworkPolicy CRDs before the daemons
   * start (a daemon lists MultiNetworkPolicies again only now and then while they are not served).
   */
  multiNetworkPolicy?: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `fn` on a simulated cluster and removes it afterwards.
 *
 * @example
 * ```ts
 * await withSimCluster({ nodes: 3 }, async (c) => { const a = await c.addPod(c.nodes[0], "a"); … });
 * ```
 */
export async function withSimCluster<T>(
  options: SimOptions,
  fn: (cluster: SimCluster) => Promise<T>,
): Promise<T> {
  const token = uniqueToken().slice(0, 6);
  const net = 64 + Math.floor(Math.random() * 64);
  const sub = Math.floor(Math.random() * 256);
  const underlay = `100.${net}.${sub}`; // 100.64.0.0/10: shared address space, never the Internet
  const podNet = `10.${200 + Math.floor(Math.random() * 50)}`;
  const internet = `198.18.${sub}.1`; // 198.18.0.0/15: benchmarking range, never routed
  const underlay6 = `fd00:64:${sub.toString(16)}`;
  const podNet6 = `fd00:${(0xa00 + Math.floor(Math.random() * 0xff)).toString(16)}`;
  const libc = Libc.open();
  const home = libc.openRead("/proc/thread-self/ns/net");
  const standin = options.kubeconfig
    ? undefined
    : await KubeStandin.start({ token: crypto.randomUUID() });
  const kubeconfigText = options.kubeconfig
    ? await Deno.readTextFile(options.kubeconfig)
    : standin!.kubeconfig();
  const apiUrl = new URL(
    options.kubeconfig ? (await loadKubeconfig(options.kubeconfig)).server : standin!.url,
  );
  const transport = options.kubeconfig
    ? new HttpTransport(await loadKubeconfig(options.kubeconfig))
    : new HttpTransport({ server: standin!.url, token: () => Promise.resolve(standin!.token) });
  const client = new KubeClient(transport);
  const createdNodes: string[] = [];
  const createdPods: string[] = [];
  const dir = await Deno.makeTempDir({ prefix: `ferry-sim-${token}-` });
  const made: string[] = [];
  const daemons: DaemonProcess[] = [];
  const listeners: Deno.Listener[] = [];
  const pods = new Set<SimPod>();
  const daemonOf = new Map<string, DaemonProcess>();
  let pool: { name: string; cidrs: string[] } | undefined;
  const netnsAdd = async (name: string): Promise<TestNetns> => {
    await run("ip", "netns", "add", name);
    made.push(name);
    await run("ip", "-n", name, "link", "set", "lo", "up");
    return { name, path: `/var/run/netns/${name}` };
  };
  /** Creates a listener inside `ns` (the JS thread switches there and back). */
  const listenIn = (ns: TestNetns, hostname: string, port: number): Deno.TcpListener => {
    const fd = libc.openRead(ns.path);
    try {
      return libc.inNetns(fd, home, () => Deno.listen({ hostname, port }));
    } finally {
      libc.close(fd);
    }
  };
  const forward = (listener: Deno.Listener, port: number) => {
    (async () => {
      for await (const conn of listener) {
        (async () => {
          try {
            const upstream = await Deno.connect({ hostname: "127.0.0.1", port });
            await Promise.all([
              conn.readable.pipeTo(upstream.writable).catch(() => {}),
              upstream.readable.pipeTo(conn.writable).catch(() => {}),
            ]);
          } catch {
            try {
              conn.close();
            } catch { /* closed */ }
          }
        })();
      }
    })().catch(() => {});
  };
  try {
    const ul = await netnsAdd(`fyu-${token}`);
    await run("ip", "-n", ul.name, "link", "add", "ul0", "type", "bridge", "mcast_snooping", "0");
    await run("ip", "-n", ul.name, "link", "set", "ul0", "up");
    const attach = async (ns: TestNetns, i: number, address: string, address6?: string) => {
      await run(
        "ip",
        "link",
        "add",
        `fyv${token}${i}`,
        "netns",
        ul.name,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        ns.name,
      );
      await run("ip", "-n", ul.name, "link", "set", `fyv${token}${i}`, "master", "ul0", "up");
      await run("ip", "-n", ns.name, "addr", "add", `${address}/24`, "dev", "eth0");
      if (address6) {
        await run("ip", "-n", ns.name, "addr", "add", `${address6}/64`, "dev", "eth0", "nodad");
      }
      await run("ip", "-n", ns.name, "link", "set", "eth0", "up");
    };
    const outside = await netnsAdd(`fyo-${token}`);
    await attach(
      outside,
      0,
      `${underlay}.100`,
      options.dualStack ? `${underlay6}::100` : undefined,
    );
    await run("ip", "-n", outside.name, "addr", "add", `${internet}/32`, "dev", "lo");
    const apiPort = Number(apiUrl.port || (apiUrl.protocol === "https:" ? 443 : 80));
    if (options.multiNetworkPolicy) {
      await installNadCrd(client);
      await installMultiPolicyCrd(client);
    }
    if (options.pool) {
      await installPoolCrds(client);
      pool = {
        name: `sim-${token}`,
        cidrs: options.dualStack ? [`${podNet}.0.0/16`, `${podNet6}::/56`] : [`${podNet}.0.0/16`],
      };
      await client.create<IpPoolObject>(IPPOOLS, {
        metadata: { name: pool.name },
        spec: { cidrs: pool.cidrs, blockSize: options.pool.blockSize },
      });
    }
    const addNodeObject: SimCluster["addNodeObject"] = async (
      suffix,
      address,
      podCIDR,
      annotations,
    ) => {
      const name = `sim-${token}-${suffix}`;
      await client.create<Node>(NODES, {
        metadata: { name, annotations },
        spec: podCIDR ? { podCIDR, podCIDRs: [podCIDR] } : {},
        status: { addresses: [{ type: "InternalIP", address }] },
      });
      createdNodes.push(name);
      return name;
    };
    const nodeObjects: string[] = [];
    for (const o of options.nodeObjects ?? []) {
      const podCIDR = o.podRange === undefined ? undefined : `${podNet}.${o.podRange}.0/24`;
      nodeObjects.push(await addNodeObject(o.suffix, o.address, podCIDR, o.annotations));
    }
    const nodes: SimNode[] = [];
    for (let i = 1; i <= options.nodes; i++) {
      const ns = await netnsAdd(`fyn-${token}-${i}`);
      const address = `${underlay}.${10 + i}`;
      const v6 = options.dualStack
        ? { address: `${underlay6}::${10 + i}`, podCIDR: `${podNet6}:${i}::/64` }
        : undefined;
      await attach(ns, i, address, v6?.address);
      await run("ip", "-n", ns.name, "route", "add", "default", "via", `${underlay}.100`);
      if (v6) {
        await run("ip", "-n", ns.name, "-6", "route", "add", "default", "via", `${underlay6}::100`);
      }
      const listener = listenIn(ns, "127.0.0.1", 0);
      listeners.push(listener);
      forward(listener, apiPort);
      const nodeDir = `${dir}/n${i}`;
      await Deno.mkdir(nodeDir, { recursive: true });
      const name = `sim-${token}-${i}`;
      const podCIDR = `${podNet}.${i}.0/24`;
      const assigned = !options.withoutPodCIDRs?.includes(i) && !options.pool;
      const podCIDRs = v6 ? [podCIDR, v6.podCIDR] : [podCIDR];
      const internal = v6 ? [address, v6.address] : [address];
      await client.create<Node>(NODES, {
        metadata: { name },
        spec: assigned ? { podCIDRs, podCIDR } : {},
        status: {
          addresses: [
            ...internal.map((a) => ({ type: "InternalIP", address: a })),
            { type: "Hostname", address: name },
          ],
        },
      });
      createdNodes.push(name);
      // The nodes reach the API through their forwarder (TLS passes through unchanged).
      await Deno.writeTextFile(
        `${nodeDir}/kubeconfig`,
        kubeconfigText.replace(
          apiUrl.origin,
          `${apiUrl.protocol}//127.0.0.1:${listener.addr.port}`,
        ),
      );
      const socket = `${nodeDir}/run/ferry.sock`;
      const config = {
        socket,
        stateDir: `${nodeDir}/state`,
        nodeName: name,
        kubeconfig: `${nodeDir}/kubeconfig`,
        routing: { mode: "host-gw" },
        masquerade: { enabled: true, nonMasqueradeCIDRs: [] },
        network: { bridge: "ferry0", forwarding: true },
        podWaitSeconds: 20,
        ...options.config,
        ipam: {
          ...(pool ? { mode: "auto", pools: [pool.name] } : { mode: "kubernetes" }),
          ...(options.config?.ipam ?? {}),
        },
      };
      await Deno.writeTextFile(`${nodeDir}/config.json`, JSON.stringify(config));
      const log = `${nodeDir}/daemon.log`;
      const daemon = new DaemonProcess(`${nodeDir}/config.json`, socket, log, ns.name);
      daemons.push(daemon);
      daemonOf.set(name, daemon);
      await daemon.start(false);
      const { shim } = await install(installUnder(nodeDir, socket));
      nodes.push({ name, ns, address, podCIDR, v6, socket, shim, log });
    }
    for (const [i, node] of nodes.entries()) {
      if (!options.withoutPodCIDRs?.includes(i + 1)) await waitReady(node);
    }
    await Deno.writeTextFile(`${dir}/kubeconfig`, kubeconfigText);
    const cluster: SimCluster = {
      kubeconfig: `${dir}/kubeconfig`,
      nodes,
      nodeObjects,
      client,
      outside,
      internet,
      async addPod(node, name, retryFor = 0, options = {}) {
        const floor = options.floor;
        // Pod names are unique per simulation: a real API server outlives it.
        name = `${name}-${token}`;
        const created = await client.create<Pod>(PODS, {
          metadata: {
            name,
            namespace: "default",
            annotations: options.annotations,
            labels: options.labels,
          },
          spec: {
            nodeName: node.name,
            containers: [{ name: "c", image: "registry.invalid/pause:3.9", ports: options.ports }],
          },
        });
        createdPods.push(name);
        const ns = await netnsAdd(`fyp-${token}-${name}`);
        const containerId = `sim${token}${name.replace(/[^a-z0-9]/g, "")}`;
        if (floor) {
          if (floor === "harness") await new Deno.Command("/bin/true").output();
          else await runShimAt(node.shim, { CNI_COMMAND: "VERSION" }, netconf());
          return { name, node, ns, ip: "", containerId, floor } as SimPod;
        }
        const until = Date.now() + retryFor;
        let out: ShimRun;
        while (true) {
          out = await runShimAt(
            node.shim,
            cniEnv("ADD", ns, containerId, "eth0", { name, uid: String(created.metadata?.uid) }),
            netconf(),
          );
          if (out.code === 0 || out.json?.code !== 11 || Date.now() > until) break;
          await sleep(100 + Math.random() * 200);
        }
        if (out.code !== 0) {
          throw new Error(
            `ADD of ${name} on ${node.name} failed: ${out.stdout}${out.stderr}; see ${node.log}`,
          );
        }
        const ips = (out.json as { ips: { address: string }[] }).ips
          .map((i) => i.address.split("/")[0]);
        // As the kubelet: the sandbox's addresses into the pod's status (best effort: a pod
        // deleted meanwhile has none to write).
        await client.patchMerge(PODS, "default", name, {
          status: { phase: "Running", podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) },
        }, { subresource: "status" }).catch(() => {});
        const pod = {
          name,
          node,
          ns,
          ip: ips.find((i) => !i.includes(":"))!,
          ip6: ips.find((i) => i.includes(":")),
          containerId,
          uid: String(created.metadata?.uid),
          result: out.json,
        };
        pods.add(pod);
        return pod;
      },
      async removePod(pod) {
        if ((pod as SimPod & { floor?: SimFloor }).floor) {
          pods.delete(pod);
          return { code: 0, stdout: "", stderr: "", json: undefined };
        }
        const uid = (pod as SimPod & { uid: string }).uid;
        const out = await runShimAt(
          pod.node.shim,
          cniEnv("DEL", pod.ns, pod.containerId, "eth0", { name: pod.name, uid }),
          netconf(),
        );
        pods.delete(pod);
        return out;
      },
      async deletePodObject(pod) {
        await client.delete(PODS, "default", pod.name, { gracePeriodSeconds: 0 });
        pods.delete(pod);
      },
      killDaemon(node) {
        return daemonOf.get(node.name)!.kill();
      },
      startDaemon(node) {
        return daemonOf.get(node.name)!.start(false);
      },
      async startImpostor(node) {
        const i = nodes.indexOf(node) + 1;
        const ns = await netnsAdd(`fyi-${token}-${i}`);
        const listener = listenIn(ns, "127.0.0.1", 0);
        listeners.push(listener);
        forward(listener, apiPort);
        const nodeDir = `${dir}/n${i}`;
        const impostorDir = `${dir}/impostor${i}`;
        await Deno.mkdir(impostorDir, { recursive: true });
        await Deno.writeTextFile(
          `${impostorDir}/kubeconfig`,
          kubeconfigText.replace(
            apiUrl.origin,
            `${apiUrl.protocol}//127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
          ),
        );
        const socket = `${impostorDir}/run/ferry.sock`;
        const config = {
          ...JSON.parse(await Deno.readTextFile(`${nodeDir}/config.json`)),
          socket,
          stateDir: `${impostorDir}/state`,
          kubeconfig: `${impostorDir}/kubeconfig`,
        };
        await Deno.writeTextFile(`${impostorDir}/config.json`, JSON.stringify(config));
        const log = `${impostorDir}/daemon.log`;
        const daemon = new DaemonProcess(`${impostorDir}/config.json`, socket, log, ns.name);
        daemons.push(daemon);
        await daemon.start(false);
        const { shim } = await install(installUnder(impostorDir, socket));
        return { ...node, ns, socket, shim, log };
      },
      async reconfigure(node, patch) {
        const path = `${dir}/n${nodes.indexOf(node) + 1}/config.json`;
        const config = JSON.parse(await Deno.readTextFile(path)) as Record<string, unknown>;
        for (const [key, value] of Object.entries(patch)) {
          const before = config[key];
          config[key] = before && typeof before === "object" && !Array.isArray(before) &&
              value && typeof value === "object" && !Array.isArray(value)
            ? { ...before, ...value }
            : value;
        }
        await Deno.writeTextFile(path, JSON.stringify(config));
        const daemon = daemonOf.get(node.name)!;
        await daemon.kill();
        await daemon.start(false);
      },
      async apiOutage(ms) {
        if (standin) {
          await standin.pause();
          await sleep(ms);
          await standin.resume();
          return;
        }
        await run("/opt/realk8s/stop.sh");
        await sleep(ms);
        await run("/opt/realk8s/start.sh", "--etcd-compaction-interval=20s");
      },
      async killAndRestart(node) {
        const daemon = daemonOf.get(node.name)!;
        await daemon.kill();
        await daemon.start(false);
      },
      deleteNode(node) {
        return client.delete(NODES, undefined, node.name).then(() => {});
      },
      pool,
      async blocks() {
        const byNode = new Map<string, string[]>();
        const { items } = await client.listAll<IpBlockObject>(IPBLOCKS, {});
        for (const b of items) {
          if (!pool || b.spec?.pool !== pool.name) continue;
          byNode.set(b.spec.node, [...(byNode.get(b.spec.node) ?? []), b.spec.cidr].sort());
        }
        return byNode;
      },
      addNodeObject,
      async setNodeAddress(name, address) {
        await client.patchMerge(NODES, undefined, name, {
          status: {
            addresses: [{ type: "InternalIP", address }, { type: "Hostname", address: name }],
          },
        }, { subresource: "status" });
      },
      async readdressNode(node, address) {
        // The new address is a secondary one until the old goes: promoted then, not removed too.
        await run(
          "ip",
          "netns",
          "exec",
          node.ns.name,
          "sysctl",
          "-qw",
          "net.ipv4.conf.eth0.promote_secondaries=1",
        );
        await run("ip", "-n", node.ns.name, "addr", "add", `${address}/24`, "dev", "eth0");
        await cluster.setNodeAddress(node.name, address);
        await run("ip", "-n", node.ns.name, "addr", "del", `${node.address}/24`, "dev", "eth0");
        // The default route went with the old primary address; it comes back over the new one.
        await run(
          "ip",
          "-n",
          node.ns.name,
          "route",
          "replace",
          "default",
          "via",
          `${underlay}.100`,
        );
        node.address = address;
      },
      async assignPodCIDR(node) {
        const current = await client.get<Node>(NODES, undefined, node.name);
        await client.update<Node>(NODES, {
          ...current,
          spec: {
            ...current.spec,
            podCIDRs: node.v6 ? [node.podCIDR, node.v6.podCIDR] : [node.podCIDR],
            podCIDR: node.podCIDR,
          },
        } as never);
      },
      acceptOnce(ns, address, port) {
        const listener = listenIn(ns, address, port);
        listeners.push(listener);
        const source = (async () => {
          for await (const conn of listener) {
            const from = (conn.remoteAddr as Deno.NetAddr).hostname;
            conn.close();
            return from;
          }
          throw new Error("the listener closed before any connection");
        })();
        source.catch(() => {});
        return {
          source,
          close() {
            try {
              listener.close();
            } catch { /* closed */ }
          },
        };
      },
    };
    return await fn(cluster);
  } finally {
    for (const daemon of daemons) await daemon.kill().catch(() => {});
    for (const l of listeners) {
      try {
        l.close();
      } catch { /* closed */ }
    }
    for (const name of made.reverse()) await run("ip", "netns", "del", name).catch(() => {});
    libc.close(home);
    for (const pod of createdPods) {
      await client.delete(PODS, "default", pod, { gracePeriodSeconds: 0 }).catch(() => {});
    }
    for (const node of createdNodes) {
      await client.delete(NODES, undefined, node).catch(() => {});
      await client.delete(LEASES, "kube-system", nodeLeaseName(node)).catch(() => {});
    }
    if (pool) {
      const { items } = await client.listAll<IpBlockObject>(IPBLOCKS, {}).catch(() => ({
        items: [] as IpBlockObject[],
      }));
      for (const b of items.filter((b) => b.spec?.pool === pool!.name)) {
        await client.delete(IPBLOCKS, undefined, b.metadata!.name!).catch(() => {});
      }
      await client.delete(IPPOOLS, undefined, pool.name).catch(() => {});
    }
    transport.close();
    await standin?.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Waits (bounded) until the node's daemon answers and is ready. */
export function waitReady(node: SimNode): Promise<void> {
  return waitForDaemon(node.socket, node.log, { ready: true });
}
