// The objects connectivity-test creates, as an attacker in the cluster sees them while a run lasts.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { DEFAULT_IMAGE, testPods } from "../../cli/connectivity/objects.ts";
import { HOST_PORT, POD_PORT } from "../../cli/connectivity/plan.ts";

Deno.test("connectivity-test's test pods serve plain HTTP with no endpoint that runs commands: no pod of the cluster gets a shell in a NET_ADMIN pod or the node's network namespace through them", () => {
  const pods = testPods("ct-x", "n0", 0, DEFAULT_IMAGE);
  assertEquals(pods.map((p) => p.metadata?.name), ["ct-0-a", "ct-0-b", "ct-0-host"]);
  for (const p of pods) {
    const [c] = p.spec!.containers;
    const port = p.spec!.hostNetwork ? HOST_PORT : POD_PORT;
    // netexec's /shell runs any command a request names, /upload writes any file.
    assert(c.args![0] !== "netexec", `${p.metadata?.name} runs agnhost ${c.args!.join(" ")}`);
    assertEquals(c.args, ["serve-hostname", "--http", `--port=${port}`], p.metadata?.name);
  }
});

Deno.test("connectivity-test gives NET_ADMIN to the -a test pods only, and only when the forged-source check runs", () => {
  const caps = (forger?: boolean) =>
    testPods("ct-x", "n0", 0, DEFAULT_IMAGE, undefined, forger).map((p) =>
      `${p.metadata?.name}:${p.spec!.containers[0].securityContext?.capabilities?.add ?? []}`
    );
  assertEquals(caps(), ["ct-0-a:NET_ADMIN", "ct-0-b:", "ct-0-host:"]);
  assertEquals(caps(false), ["ct-0-a:", "ct-0-b:", "ct-0-host:"]);
});
