// Denied connections logged (daemon/policy/nflog.ts): the NFLOG messages' bytes, a logged packet
// read back, and in real namespaces a connection the policy table drops reaching the log as one
// line naming the pod, its peer and the policy (the kernel's NFLOG, a table with the log rule).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import type { Logger } from "@logtape/logtape";
import {
  ackErrno,
  DeniedLog,
  denyPrefix,
  nflogBindMessages,
  parseNflog,
} from "../../../daemon/policy/nflog.ts";
import { compilePolicies, ipInBlock, type PolicyView } from "../../../daemon/policy/compile.ts";
import { policyScript } from "../../../daemon/policy/nft_scripts.ts";
import { renderPolicyTable } from "../../../daemon/policy/nft_policy.ts";
import { NftRunner } from "../../../daemon/cluster/masquerade.ts";
import { Libc } from "../../../daemon/net/netlink/libc.ts";
import { PolicyEnforcer } from "../../../daemon/policy/policy_enforcer.ts";
import { IS_ROOT, run, withNetns } from "../../../daemon/dev/netns.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

/** One NFLOG packet message as the kernel sends it: family, prefix, payload. */
function packetMessage(family: number, prefix: string, payload: number[]): Uint8Array {
  const attr = (type: number, data: Uint8Array) => {
    const out = new Uint8Array((4 + data.length + 3) & ~3);
    new DataView(out.buffer).setUint16(0, 4 + data.length, true);
    new DataView(out.buffer).setUint16(2, type, true);
    out.set(data, 4);
    return out;
  };
  const attrs = [
    attr(10, new TextEncoder().encode(prefix + "\0")),
    attr(9, new Uint8Array(payload)),
  ];
  const len = 20 + attrs.reduce((n, a) => n + a.length, 0);
  const out = new Uint8Array(len);
  const v = new DataView(out.buffer);
  v.setUint32(0, len, true);
  v.setUint16(4, 0x400, true);
  out[16] = family;
  let at = 20;
  for (const a of attrs) {
    out.set(a, at);
    at += a.length;
  }
  return out;
}

Deno.test("binding an NFLOG group: the config command, then packet copy of the headers", () => {
  const [bind, mode] = nflogBindMessages(31742, 7);
  const v = new DataView(bind.buffer);
  assertEquals(v.getUint32(0, true), bind.length);
  assertEquals(v.getUint16(4, true), 0x401, "NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG");
  assertEquals(v.getUint16(6, true), 5, "request, ack");
  assertEquals(v.getUint16(18, false), 31742, "res_id: the group, big-endian");
  assertEquals([...bind.subarray(20, 25)], [5, 0, 1, 0, 1], "NFULA_CFG_CMD BIND");
  const m = new DataView(mode.buffer);
  assertEquals(m.getUint16(22, true), 2, "NFULA_CFG_MODE");
  assertEquals(m.getUint32(24, false), 96, "copy range");
  assertEquals(mode[28], 2, "NFULNL_COPY_PACKET");
});

Deno.test("a logged packet is read back: prefix, addresses, protocol and ports, of either family", () => {
  const v4 = packetMessage(2, denyPrefix("ingress", "a/db"), [
    0x45,
    0,
    0,
    60,
    0,
    0,
    0,
    0,
    64,
    6,
    0,
    0,
    10,
    1,
    0,
    6,
    10,
    1,
    0,
    5,
    0x9c,
    0x40,
    0x15,
    0x38,
    0,
    0,
    0,
    0,
  ]);
  const v6 = packetMessage(10, denyPrefix("egress", "a/web"), [
    0x60,
    0,
    0,
    0,
    0,
    8,
    17,
    64,
    0xfd,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    6,
    0xfd,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    5,
    0x30,
    0x39,
    0,
    53,
  ]);
  const both = new Uint8Array([...v4, ...v6]);
  assertEquals(parseNflog(both, both.length), [
    {
      prefix: "in a/db",
      family: 4,
      protocol: "tcp",
      src: "10.1.0.6",
      dst: "10.1.0.5",
      sport: 40000,
      dport: 5432,
    },
    {
      prefix: "eg a/web",
      family: 6,
      protocol: "udp",
      src: "fd00::6",
      dst: "fd00::5",
      sport: 12345,
      dport: 53,
    },
  ]);
  const ack = new Uint8Array(36);
  new DataView(ack.buffer).setUint16(4, 2, true);
  new DataView(ack.buffer).setInt32(16, -16, true);
  assertEquals(ackErrno(ack, 36), 16);
});

/** A logger that keeps what it is told. */
function keepingLogger(lines: { message: string; props: Record<string, unknown> }[]): Logger {
  const keep = (message: string, props: Record<string, unknown>) => lines.push({ message, props });
  return { info: keep, warn: keep, error: keep, debug: keep } as unknown as Logger;
}

Deno.test({
  name:
    "a connection the policy table drops is logged once, naming the pod, its peer and the policy",
  ignore: !IS_ROOT || !hasNft,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: () =>
    withNetns(3, async ([client, node, pod]) => {
      // client 10.199.1.6 → node (routes, holds the table) → pod 10.199.0.5, as between nodes.
      const link = async (a: string, aIp: string, b: string, bIp: string, ns: [string, string]) => {
        await run(
          "ip",
          "link",
          "add",
          a,
          "netns",
          ns[0],
          "type",
          "veth",
          "peer",
          "name",
          b,
          "netns",
          ns[1],
        );
        await run("ip", "-n", ns[0], "addr", "add", aIp, "dev", a);
        await run("ip", "-n", ns[1], "addr", "add", bIp, "dev", b);
        await run("ip", "-n", ns[0], "link", "set", a, "up");
        await run("ip", "-n", ns[1], "link", "set", b, "up");
      };
      await link("fyl0", "10.199.1.6/24", "fyl1", "10.199.1.1/24", [client.name, node.name]);
      await link("fyl2", "10.199.0.1/24", "fyl3", "10.199.0.5/24", [node.name, pod.name]);
      await run("ip", "-n", client.name, "route", "add", "default", "via", "10.199.1.1");
      await run("ip", "-n", pod.name, "route", "add", "default", "via", "10.199.0.1");
      await run("ip", "netns", "exec", node.name, "sysctl", "-qw", "net.ipv4.ip_forward=1");
      const view: PolicyView = {
        namespaces: new Map([["a", {}]]),
        pods: [
          {
            namespace: "a",
            name: "db",
            labels: { app: "db" },
            ips: ["10.199.0.5"],
            hostNetwork: false,
            done: false,
            ports: [],
          },
        ],
        policies: [{
          metadata: { namespace: "a", name: "db-closed" },
          spec: { podSelector: { matchLabels: { app: "db" } }, policyTypes: ["Ingress"] },
        }],
      };
      const group = 31000 + Math.floor(Math.random() * 1000);
      const table = renderPolicyTable("fyl", compilePolicies(view, view.pods, ipInBlock), {
        group,
        perSecond: 10,
      })!;
      await new NftRunner().applyIn(node.path, policyScript("fyl", table));
      const libc = Libc.open();
      const home = libc.openRead("/proc/self/ns/net");
      const target = libc.openRead(node.path);
      const lines: { message: string; props: Record<string, unknown> }[] = [];
      const log = new DeniedLog({
        sys: {
          netfilterSocket: (ms) => libc.inNetns(target, home, () => libc.netfilterSocket(ms)),
          send: (fd, msg) => libc.send(fd, msg),
          recv: (fd, buf) => libc.recv(fd, buf),
          recvOffThread: (fd, buf) => libc.recvOffThread(fd, buf),
          close: (fd) => libc.close(fd),
        },
        group,
        perSecond: 10,
        describe: (p) => ({
          pod: p.prefix.slice(3),
          direction: "ingress",
          peer: p.src === "10.199.1.6" ? "a/client" : p.src,
          policies: ["a/db-closed"],
        }),
        logger: keepingLogger(lines),
      });
      log.start();
      try {
        const attempt = await new Deno.Command("ip", {
          args: [
            "netns",
            "exec",
            client.name,
            "python3",
            "-c",
            "import socket\ntry:\n  socket.create_connection(('10.199.0.5',5432),timeout=1)\nexcept Exception:\n  pass\n",
          ],
        }).output();
        assert(attempt.success);
        const deadline = Date.now() + 5000;
        while (!lines.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        const denied = lines.find((l) => l.message.startsWith("network policy denied"))!;
        assert(denied, JSON.stringify(lines));
        assertEquals(
          [denied.props.pod, denied.props.peer, denied.props.policies, denied.props.protocol],
          ["a/db", "a/client", "a/db-closed", "tcp"],
        );
        assertEquals([denied.props.src, denied.props.dst, denied.props.dport], [
          "10.199.1.6",
          "10.199.0.5",
          ":5432",
        ]);
      } finally {
        await log.close();
        libc.close(home);
        libc.close(target);
      }
    }),
});

Deno.test("a denied packet is described from the caches: the pod, the peer pod by its address, the policies isolating the pod that way", () => {
  const enforcer = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: { apply: () => Promise.resolve(), remove: () => Promise.resolve() },
    synced: () => true,
    logger: keepingLogger([]),
  });
  const pod = (name: string, ip: string, labels: Record<string, string>) => ({
    metadata: { name, namespace: "a", labels },
    spec: { nodeName: "n1", containers: [] },
    status: { phase: "Running", podIPs: [{ ip }] },
  });
  enforcer.podUpserted(pod("db", "10.1.0.5", { app: "db" }));
  enforcer.podUpserted(pod("web", "10.1.0.6", { app: "web" }));
  enforcer.policyUpserted({
    metadata: { namespace: "a", name: "db-in" },
    spec: { podSelector: { matchLabels: { app: "db" } }, policyTypes: ["Ingress"] },
  });
  enforcer.policyUpserted({
    metadata: { namespace: "a", name: "db-out" },
    spec: { podSelector: { matchLabels: { app: "db" } }, policyTypes: ["Egress"] },
  });
  assertEquals(
    enforcer.describe({
      prefix: "in a/db",
      family: 4,
      protocol: "tcp",
      src: "10.1.0.6",
      dst: "10.1.0.5",
      dport: 5432,
    }),
    { pod: "a/db", direction: "ingress", peer: "a/web", policies: ["a/db-in"] },
  );
  assertEquals(
    enforcer.describe({
      prefix: "eg a/db",
      family: 4,
      protocol: "udp",
      src: "10.1.0.5",
      dst: "8.8.8.8",
    })
      ?.peer,
    "8.8.8.8",
  );
});
