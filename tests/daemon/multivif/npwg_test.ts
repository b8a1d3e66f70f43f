import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { NpwgDriver } from "../../../daemon/multivif/drivers.ts";
import { NadCache } from "../../../daemon/multivif/nad_cache.ts";
import type { RegisteredPod } from "../../../daemon/records/registry.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const pod = (networks: string): RegisteredPod => ({
  namespace: "app",
  name: "web-0",
  uid: "u1",
  resourceVersion: "1",
  annotations: { "k8s.v1.cni.cncf.io/networks": networks },
  labels: {},
  terminating: false,
});

const nad = (namespace: string, name: string, config?: string) => ({
  metadata: { namespace, name },
  spec: config === undefined ? {} : { config },
});

function driver(options: { cross?: boolean; files?: Record<string, string> } = {}) {
  const nads = new NadCache();
  const npwg = new NpwgDriver({
    nads,
    allowCrossNamespace: options.cross ?? false,
    interfacePrefix: "net",
    configDir: "/conf",
    readFile: (path) => Promise.resolve(options.files?.[path]),
  });
  return { nads, npwg };
}

const MACVLAN = '{"cniVersion":"1.0.0","type":"macvlan","master":"eth0"}';

Deno.test("a NAD of another namespace is refused unless cross-namespace selection is allowed", async () => {
  const { nads, npwg } = driver();
  nads.upsert(nad("other", "mv", MACVLAN));
  const e = await assertRejects(
    () => npwg.requested(pod("other/mv"), "eth0", AbortSignal.timeout(1000)),
    CniError,
  );
  assertEquals(e.code, 7);
  assertEquals(e.message.includes("allowCrossNamespace"), true, e.message);
  const open = driver({ cross: true });
  open.nads.upsert(nad("other", "mv", MACVLAN));
  const { attachments } = await open.npwg.requested(
    pod("other/mv"),
    "eth0",
    AbortSignal.timeout(1000),
  );
  assertEquals(attachments.map((a) => [a.network, a.ifname]), [["other/mv", "net1"]]);
});

Deno.test("a NAD without spec.config takes <name>.conflist from the config directory, or is refused", async () => {
  const { nads, npwg } = driver({
    files: { "/conf/mv.conflist": '{"cniVersion":"0.4.0","plugins":[{"type":"macvlan"}]}' },
  });
  nads.upsert(nad("app", "mv"));
  nads.upsert(nad("app", "none"));
  const { attachments } = await npwg.requested(pod("mv"), "eth0", AbortSignal.timeout(1000));
  assertEquals(attachments[0].plugins.map((p) => [p.type, p.cniVersion, p.name]), [
    ["macvlan", "0.4.0", "mv"],
  ]);
  const e = await assertRejects(
    () => npwg.requested(pod("none"), "eth0", AbortSignal.timeout(1000)),
    CniError,
  );
  assertEquals(e.code, 7);
  assertEquals(e.message.includes("no spec.config"), true, e.message);
});

Deno.test("a NAD that reaches the watch after the ADD is waited for; one that never does is code 11", async () => {
  const { nads, npwg } = driver();
  const pending = npwg.requested(pod("late"), "eth0", AbortSignal.timeout(2000));
  setTimeout(() => nads.upsert(nad("app", "late", MACVLAN)), 50);
  assertEquals((await pending).attachments.map((a) => a.network), ["app/late"]);
  const e = await assertRejects(
    () => npwg.requested(pod("never"), "eth0", AbortSignal.timeout(100)),
    CniError,
  );
  assertEquals(e.code, 11);
  assertEquals(e.message.includes("app/never"), true, e.message);
});

Deno.test("a pod without the annotation asks for nothing", async () => {
  const { npwg } = driver();
  const p = { ...pod(""), annotations: {} };
  assertEquals(await npwg.requested(p, "eth0", AbortSignal.timeout(100)), {
    attachments: [],
    warnings: [],
  });
});

Deno.test("ipam type ferry is taken on a plugin Ferry plugs itself and refused with code 7 on one it would delegate", async () => {
  const { nads, npwg } = driver();
  const ipam = { type: "ferry", pool: "telco" };
  nads.upsert(
    nad(
      "app",
      "mv",
      JSON.stringify({ cniVersion: "1.0.0", type: "macvlan", master: "eth0", ipam }),
    ),
  );
  nads.upsert(
    nad(
      "app",
      "vl",
      JSON.stringify({ cniVersion: "1.0.0", type: "vlan", master: "eth0", vlanId: 10, ipam }),
    ),
  );
  nads.upsert(nad(
    "app",
    "chained",
    JSON.stringify({
      cniVersion: "1.0.0",
      plugins: [{ type: "macvlan", master: "eth0", ipam }, { type: "tuning", ipam }],
    }),
  ));
  const signal = AbortSignal.timeout(5000);
  const { attachments } = await npwg.requested(pod("mv"), "eth0", signal);
  assertEquals(attachments[0].plugins[0].ipam, ipam);
  for (const name of ["vl", "chained"]) {
    const e = await assertRejects(() => npwg.requested(pod(name), "eth0", signal), CniError);
    assertEquals(e.code, 7, e.message);
    assertEquals(e.message.includes("ipam.type ferry is served only"), true, e.message);
  }
});
