import { assertEquals } from "deno-std/assert/mod.js";
import type { Node } from "kubernetes-types/core/v1.d.ts";
import { hostGwRoutes, routeChanges } from "../../../daemon/cluster/routes.ts";
import {
  type ClusterNode,
  NodeMap,
  slimNode,
  stripNode,
  VTEP_ANNOTATION,
} from "../../../daemon/cluster/nodes.ts";

const n = (name: string, internalIPs: string[], podCIDRs: string[]): ClusterNode => ({
  name,
  internalIPs,
  podCIDRs,
});

Deno.test("host-gw routes every other node's pod ranges via its address of the same family", () => {
  const nodes = [
    n("n1", ["192.0.2.11", "2001:db8::11"], ["10.244.1.0/24", "fd00:1::/64"]),
    n("n2", ["192.0.2.12", "2001:db8::12"], ["10.244.2.0/24", "fd00:2::/64"]),
    n("n3", ["192.0.2.13"], ["10.244.3.0/24", "fd00:3::/64"]),
    n("n4", ["192.0.2.14"], []),
  ];
  assertEquals(hostGwRoutes(nodes, "n1"), {
    routes: [
      { dst: "10.244.2.0/24", via: "192.0.2.12" },
      { dst: "10.244.3.0/24", via: "192.0.2.13" },
      { dst: "fd00:2::/64", via: "2001:db8::12" },
    ],
    unroutable: [{ node: "n3", dst: "fd00:3::/64", reason: "the node has no IPv6 InternalIP" }],
  });
});

Deno.test("route changes replace new or moved routes and remove those of vanished nodes", () => {
  const live = [
    { dst: "10.244.2.0/24", via: "192.0.2.12" },
    { dst: "10.244.3.0/24", via: "192.0.2.13" },
    { dst: "10.244.9.0/24", via: "192.0.2.19" },
  ];
  const desired = [
    { dst: "10.244.2.0/24", via: "192.0.2.12" },
    { dst: "10.244.3.0/24", via: "192.0.2.33" },
    { dst: "10.244.4.0/24", via: "192.0.2.14" },
  ];
  assertEquals(routeChanges(live, desired), {
    replace: [
      { dst: "10.244.3.0/24", via: "192.0.2.33" },
      { dst: "10.244.4.0/24", via: "192.0.2.14" },
    ],
    remove: [{ dst: "10.244.9.0/24", via: "192.0.2.19" }],
  });
});

Deno.test("a node is stripped to its name, InternalIPs and pod ranges; the old podCIDR field counts", () => {
  assertEquals(
    stripNode({
      metadata: { name: "n1", labels: { big: "x".repeat(100) } },
      spec: { podCIDR: "10.244.1.0/24" },
      status: {
        addresses: [
          { type: "Hostname", address: "n1" },
          { type: "InternalIP", address: "192.0.2.11" },
          { type: "ExternalIP", address: "198.51.100.1" },
        ],
      },
    }),
    { name: "n1", internalIPs: ["192.0.2.11"], podCIDRs: ["10.244.1.0/24"] },
  );
});

Deno.test("the node map tells listeners of changes that matter, not of repeats", () => {
  const nodes = new NodeMap();
  let changes = 0;
  nodes.onChange(() => changes++);
  const node = { metadata: { name: "n1" }, spec: { podCIDRs: ["10.244.1.0/24"] } };
  nodes.upsert(node);
  nodes.upsert({ ...node, metadata: { name: "n1", resourceVersion: "2" } });
  assertEquals(changes, 1);
  nodes.remove(node);
  nodes.remove(node);
  assertEquals([changes, nodes.size], [2, 0]);
});

Deno.test("the node watch keeps what routing reads of a Node: images, conditions, labels and other annotations are dropped", () => {
  const vtep = JSON.stringify({ mac: "02:00:00:00:00:01", ip: "192.0.2.11" });
  const full: Node = {
    metadata: {
      name: "n1",
      uid: "u1",
      resourceVersion: "7",
      labels: { "kubernetes.io/hostname": "n1" },
      annotations: { [VTEP_ANNOTATION]: vtep, "node.alpha.kubernetes.io/ttl": "0" },
      managedFields: [{ manager: "kubelet", operation: "Update", fieldsType: "FieldsV1" }],
    },
    spec: { podCIDR: "10.244.1.0/24", podCIDRs: ["10.244.1.0/24", "fd00:1::/64"], providerID: "x" },
    status: {
      addresses: [{ type: "InternalIP", address: "192.0.2.11" }, {
        type: "Hostname",
        address: "n1",
      }],
      conditions: [{ type: "Ready", status: "True" }],
      images: [{
        names: ["registry.example/app@sha256:0", "registry.example/app:1"],
        sizeBytes: 1,
      }],
      capacity: { cpu: "2" },
    },
  };
  const slim = slimNode(full);
  assertEquals(stripNode(slim), stripNode(full));
  assertEquals(JSON.parse(JSON.stringify(slim)), {
    metadata: {
      name: "n1",
      uid: "u1",
      resourceVersion: "7",
      annotations: { [VTEP_ANNOTATION]: vtep },
    },
    spec: { podCIDR: "10.244.1.0/24", podCIDRs: ["10.244.1.0/24", "fd00:1::/64"] },
    status: {
      addresses: [{ type: "InternalIP", address: "192.0.2.11" }, {
        type: "Hostname",
        address: "n1",
      }],
    },
  });
});
