// A tenant's NAD whose config is nested 20,000 levels deep, or is megabytes long, and a pod
// annotation nested as deep, are refused like every other bad NAD (code 7 naming the NAD, an Event
// on the pod), never answered 999 by a stack overflow; the daemon keeps serving: the next ADD on a
// sound NAD succeeds. On the simulated cluster (stand-in or real server). Needs root and nft.
import { assert, assertRejects } from "deno-std/assert/mod.js";
import { withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";
import { eventually } from "./_cluster.ts";
import { eventOn, withNads } from "./_nads.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

/** A macvlan config whose `args` hold `depth` nested objects (the text built without recursion). */
function deepConfig(depth: number): string {
  return `{"cniVersion":"1.0.0","type":"macvlan","master":"eth0","args":` +
    `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}}`;
}

Deno.test({
  name:
    "a NAD nested 20,000 levels deep, a 2 MB one and a pod annotation nested as deep are refused with code 7 and an Event, and the daemon serves the next ADD",
  ignore: !IS_ROOT || !hasNft,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create: nad }) => {
          const [node] = c.nodes;
          const deep = `deep-${t}`, huge = `huge-${t}`, sound = `ok-${t}`;
          await nad(deep, deepConfig(20_000));
          await nad(
            huge,
            JSON.stringify({
              cniVersion: "1.0.0",
              type: "macvlan",
              master: "eth0",
              pad: "x".repeat(2 * 1024 * 1024),
            }),
          );
          await nad(
            sound,
            JSON.stringify({
              cniVersion: "1.0.0",
              type: "macvlan",
              master: "eth0",
              mode: "bridge",
              ipam: { type: "static", addresses: [{ address: "192.168.87.11/24" }] },
            }),
          );
          const deepAnnotation = JSON.stringify([{ name: sound, "cni-args": { a: 1 } }])
            .replace('{"a":1}', `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`);
          const cases: [string, Record<string, string>, string, string][] = [
            [
              "dpa",
              { "k8s.v1.cni.cncf.io/networks": deep },
              `NetworkAttachmentDefinition default/${deep}`,
              "nested 20001 levels deep (at most 64)",
            ],
            [
              "hga",
              { "k8s.v1.cni.cncf.io/networks": huge },
              `NetworkAttachmentDefinition default/${huge}`,
              "(at most 262144)",
            ],
            [
              "dan",
              { "k8s.v1.cni.cncf.io/networks": deepAnnotation },
              "k8s.v1.cni.cncf.io/networks",
              "nested 20002 levels deep (at most 64)",
            ],
          ];
          for (const [pod, annotations, names, why] of cases) {
            const err = String(await assertRejects(() => c.addPod(node, pod, 0, { annotations })));
            assert(err.includes('"code":7'), `${pod}: not code 7: ${err.slice(0, 400)}`);
            assert(
              err.includes(names),
              `${pod}: the error does not name ${names}: ${err.slice(0, 400)}`,
            );
            assert(
              err.includes(why),
              `${pod}: the error does not say ${why}: ${err.slice(0, 400)}`,
            );
            await eventually(
              () => eventOn(c, pod, "InvalidNetworkSelection", why),
              `an Event on ${pod} saying ${why}`,
            );
          }
          // The daemon is still serving: a pod on the sound NAD gets its interface.
          const fine = await c.addPod(node, "oka", 0, {
            annotations: { "k8s.v1.cni.cncf.io/networks": sound },
          });
          assert(fine.ip, "the next ADD after the refusals succeeded");
        }),
    ),
});
