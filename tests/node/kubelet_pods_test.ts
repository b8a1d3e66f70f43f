// `deno task test:node`: what only a real kubelet shows. A real kubelet and containerd (node
// kl-node1, built by shared/tools/realkubelet on the realk8s apiserver) run pods created with
// kubectl; Ferry is their CNI (installed with install-cni, its daemon watching the node's pods).
// Needs root, /opt/realkubelet (build.sh) and /opt/realk8s; skipped (and said) otherwise.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";
import { run, uniqueToken } from "../../daemon/dev/netns.ts";
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

Deno.test({
  name:
    "real kubelet: Ferry in kubernetes mode networks kubectl-created pods from the node's podCIDR; they reach each other, the outside masqueraded, and a hostPort reaches its pod",
  ignore: !NODE_READY,
  fn: async () => {
    const token = uniqueToken().slice(0, 6);
    const third = 1 + Math.floor(Math.random() * 250);
    const podCIDR = `10.247.${third}.0/24`;
    const outside = `fko-${token}`;
    const hostEnd = `fko${token}`;
    const link = `100.127.${third}`; // host 100.127.N.1, outside 100.127.N.2
    const internet = `198.18.${third}.1`;
    const names = [`kl-a${token}`, `kl-b${token}`];
    // (more pods join below; all go in the clean-up)
    const tablesBefore = await run("nft", "list", "tables").catch(() => "");
    const config = await Deno.makeTempFile({ suffix: ".json" });
    await Deno.writeTextFile(
      config,
      JSON.stringify({
        ipam: { mode: "kubernetes" },
        network: { bridge: "klferry0" },
        masquerade: { enabled: true },
      }),
    );
    try {
      await sh(`${TOOLS}/ferry.sh`, "install", REPO);
      await sh(`${TOOLS}/start.sh`);
      // No controller-manager here: give the node its podCIDR as --allocate-node-cidrs would.
      await kubectl(
        "patch",
        "node",
        "kl-node1",
        "--type",
        "merge",
        "-p",
        JSON.stringify({ spec: { podCIDR, podCIDRs: [podCIDR] } }),
      );
      await sh(`${TOOLS}/ferry.sh`, "start", REPO, config);
      // The outside: a namespace of the test's own behind a veth, holding the "internet" address.
      await run("ip", "netns", "add", outside);
      await run(
        "ip",
        "link",
        "add",
        hostEnd,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        outside,
      );
      await run("ip", "addr", "add", `${link}.1/30`, "dev", hostEnd);
      await run("ip", "link", "set", hostEnd, "up");
      await run("ip", "-n", outside, "addr", "add", `${link}.2/30`, "dev", "eth0");
      await run("ip", "-n", outside, "link", "set", "eth0", "up");
      await run("ip", "-n", outside, "link", "set", "lo", "up");
      await run("ip", "-n", outside, "addr", "add", `${internet}/32`, "dev", "lo");
      await run("ip", "route", "add", `${internet}/32`, "via", `${link}.2`);
      for (const name of names) await applyPod(name);
      await kubectl(
        "wait",
        "--for=condition=Ready",
        "--timeout=90s",
        ...names.map((n) => `pod/${n}`),
      );
      const ips = [];
      for (const name of names) {
        const ip = (await kubectl("get", "pod", name, "-o", "jsonpath={.status.podIP}")).trim();
        assert(cidrContains(parseCidr(podCIDR), parseIp(ip)), `${name} ${ip} in ${podCIDR}`);
        ips.push(ip);
      }
      await kubectl("exec", names[0], "--", "ping", "-c", "1", "-W", "3", ips[1]);
      // The outside sees the node's address, not the pod's.
      const listener = new Deno.Command("ip", {
        args: [
          "netns",
          "exec",
          outside,
          "python3",
          "-c",
          `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("${internet}", 8080)); s.listen(1); s.settimeout(30)
c, peer = s.accept(); print(peer[0]); c.close()`,
        ],
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      await new Promise((r) => setTimeout(r, 500));
      await kubectl(
        "exec",
        names[0],
        "--",
        "sh",
        "-c",
        `echo hi | nc -w 3 ${internet} 8080`,
      );
      const seen = new TextDecoder().decode((await listener.output()).stdout).trim();
      assertEquals(seen, `${link}.1`, "masqueraded to the node's address toward the outside");
      // The conflist chains portmap: a hostPort on the node reaches the pod.
      const hostPort = 18000 + Math.floor(Math.random() * 1000);
      const web = `kl-w${token}`;
      const yaml = await Deno.makeTempFile({ suffix: ".yaml" });
      await Deno.writeTextFile(
        yaml,
        JSON.stringify({
          apiVersion: "v1",
          kind: "Pod",
          metadata: { name: web, namespace: "default", labels: { app: "kl-test" } },
          spec: {
            nodeName: "kl-node1",
            automountServiceAccountToken: false,
            terminationGracePeriodSeconds: 1,
            enableServiceLinks: false,
            dnsPolicy: "Default",
            containers: [{
              name: "main",
              image: "localhost/kl-busybox:1.35",
              imagePullPolicy: "Never",
              command: ["httpd", "-f", "-p", "8080", "-h", "/"],
              ports: [{ containerPort: 8080, hostPort }],
            }],
          },
        }),
      );
      names.push(web);
      await kubectl("apply", "-f", yaml);
      await Deno.remove(yaml);
      await kubectl("wait", "--for=condition=Ready", "--timeout=90s", `pod/${web}`);
      const nodeIp = (await sh("ip", "-4", "route", "get", "1.1.1.1")).match(/ src (\S+)/)![1];
      const res = await fetch(`http://${nodeIp}:${hostPort}/`, {
        signal: AbortSignal.timeout(5000),
      });
      await res.body?.cancel();
      assert(res.status > 0, `hostPort ${hostPort} answered HTTP ${res.status}`);
      // The daemon matched the pods through its watch and recorded them.
      const annotations = await kubectl(
        "get",
        "pod",
        names[1],
        "-o",
        "jsonpath={.metadata.annotations.ferry\\.dev/attachments}",
      );
      assert(annotations.includes(ips[1]), annotations);
    } finally {
      await kubectl("delete", "pod", "--ignore-not-found", "--wait=true", "--timeout=60s", ...names)
        .catch(() => {});
      await sh(`${TOOLS}/stop.sh`, "--clean").catch(() => {});
      await sh(`${TOOLS}/ferry.sh`, "stop").catch(() => {});
      await sh(`${TOOLS}/ferry.sh`, "clean").catch(() => {});
      await run("nft", "delete", "table", "inet", "ferry").catch(() => {});
      // Port security's table (on by default), which a stopped daemon leaves as a node's must.
      await run("nft", "delete", "table", "bridge", "ferry-portsec").catch(() => {});
      await removePortmapChains(tablesBefore);
      await run("ip", "route", "del", `${internet}/32`).catch(() => {});
      await run("ip", "link", "del", hostEnd).catch(() => {});
      await run("ip", "netns", "del", outside).catch(() => {});
      await Deno.remove(config).catch(() => {});
    }
  },
});

if (!NODE_READY) {
  console.log(
    `test:node skipped: needs root, /opt/realkubelet (shared/tools/realkubelet/build.sh) and ${KUBECONFIG}`,
  );
}
