import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import {
  fileToken,
  inClusterConfig,
  KubeconfigError,
  loadKubeconfig,
} from "../../../daemon/k8s/kubeconfig.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const kubeconfig = (cluster: string, user: string) => `
apiVersion: v1
kind: Config
current-context: ctx
contexts: [{name: ctx, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {${cluster}}}]
users: [{name: u, user: {${user}}}]
`;

Deno.test("a kubeconfig with a CA file (relative to it) and a token yields server, CA and token", () =>
  withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/ca.crt`, "CA PEM");
    await Deno.writeTextFile(
      `${dir}/config`,
      kubeconfig(`server: "https://10.0.0.1:6443", certificate-authority: ca.crt`, `token: abc`),
    );
    const c = await loadKubeconfig(`${dir}/config`);
    assertEquals([c.server, c.caCert, await c.token!()], [
      "https://10.0.0.1:6443",
      "CA PEM",
      "abc",
    ]);
  }));

Deno.test("inline certificate data is base64-decoded for the client certificate and key", () =>
  withTempDir(async (dir) => {
    const b64 = (s: string) => btoa(s);
    await Deno.writeTextFile(
      `${dir}/config`,
      kubeconfig(
        `server: "https://k:6443", certificate-authority-data: ${b64("CA")}`,
        `client-certificate-data: ${b64("CERT")}, client-key-data: ${b64("KEY")}`,
      ),
    );
    const c = await loadKubeconfig(`${dir}/config`);
    assertEquals([c.caCert, c.clientCert, c.clientKey, c.token], ["CA", "CERT", "KEY", undefined]);
  }));

Deno.test("insecure-skip-tls-verify is refused unless allowed, exec credentials always, with a clear error", () =>
  withTempDir(async (dir) => {
    await Deno.writeTextFile(
      `${dir}/a`,
      kubeconfig(`server: "https://k", insecure-skip-tls-verify: true`, `token: t`),
    );
    await assertRejects(
      () => loadKubeconfig(`${dir}/a`),
      KubeconfigError,
      "insecure-skip-tls-verify",
    );
    assertEquals(
      (await loadKubeconfig(`${dir}/a`, { allowInsecureTls: true })).server,
      "https://k",
    );
    await Deno.writeTextFile(`${dir}/b`, kubeconfig(`server: "https://k"`, `exec: {command: aws}`));
    await assertRejects(() => loadKubeconfig(`${dir}/b`), KubeconfigError, "exec");
    await assertRejects(() => loadKubeconfig(`${dir}/missing`), KubeconfigError, "cannot read");
  }));

Deno.test("in-cluster config uses the service host, the mounted CA, and re-reads a rotated token", () =>
  withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/ca.crt`, "CA");
    await Deno.writeTextFile(`${dir}/token`, "first\n");
    const env: Record<string, string> = {
      KUBERNETES_SERVICE_HOST: "fd00::1",
      KUBERNETES_SERVICE_PORT: "443",
    };
    const c = await inClusterConfig((n) => env[n], dir);
    assertEquals([c.server, c.caCert, await c.token!()], ["https://[fd00::1]:443", "CA", "first"]);
    let now = 0;
    const token = fileToken(`${dir}/token`, 1000, () => now);
    assertEquals(await token(), "first");
    await Deno.writeTextFile(`${dir}/token`, "rotated");
    assertEquals(await token(), "first", "cached within the TTL");
    now = 1000;
    assertEquals(await token(), "rotated");
    await assertRejects(
      () => inClusterConfig(() => undefined, dir),
      KubeconfigError,
      "not in a cluster",
    );
  }));

Deno.test("a context named by the caller is used instead of the current one (kubectl --context)", () =>
  withTempDir(async (dir) => {
    await Deno.writeTextFile(
      `${dir}/config`,
      `
current-context: a
contexts:
  - {name: a, context: {cluster: ca, user: u}}
  - {name: b, context: {cluster: cb, user: u}}
clusters:
  - {name: ca, cluster: {server: "https://a:6443"}}
  - {name: cb, cluster: {server: "https://b:6443"}}
users: [{name: u, user: {token: t}}]
`,
    );
    assertEquals((await loadKubeconfig(`${dir}/config`)).server, "https://a:6443");
    assertEquals(
      (await loadKubeconfig(`${dir}/config`, { context: "b" })).server,
      "https://b:6443",
    );
    await assertRejects(
      () => loadKubeconfig(`${dir}/config`, { context: "c" }),
      KubeconfigError,
      'no context named "c"',
    );
  }));
