import { assert, assertEquals } from "deno-std/assert/mod.js";
import {
  isSecretKey,
  MAX_REDACT_DEPTH,
  redact,
  REDACTED,
  redactText,
  scrubText,
} from "../../../daemon/tools/redact.ts";

Deno.test("secret keys are known in any case and spelling; ordinary keys are not", () => {
  for (
    const k of [
      "password",
      "etcd_password",
      "Passwd",
      "client_secret",
      "token",
      "apiToken",
      "apiKey",
      "api_key",
      "API-KEY",
      "key",
      "privateKey",
      "private_key",
      "access_key",
      "credentials",
      "etcd_username",
      "etcd_key_file",
      "client-key-data",
      "Authorization",
      "basic_auth",
      "passphrase",
    ]
  ) assert(isSecretKey(k), `${k} is secret`);
  for (const k of ["master", "type", "range", "etcd_host", "name", "mode", "subnet", "monkeys"]) {
    assert(!isSecretKey(k), `${k} is not secret`);
  }
});

Deno.test("a NAD config inside a JSON string is redacted key by key; one that is not JSON whole", () => {
  const config = JSON.stringify({
    type: "macvlan",
    apiKey: "k1",
    ipam: { type: "whereabouts", etcd_host: "h", etcd_password: "p1", nested: [{ Token: "t1" }] },
  });
  const out = redact({ spec: { config } }) as { spec: { config: string } };
  assertEquals(JSON.parse(out.spec.config), {
    type: "macvlan",
    apiKey: REDACTED,
    ipam: {
      type: "whereabouts",
      etcd_host: "h",
      etcd_password: REDACTED,
      nested: [{ Token: REDACTED }],
    },
  });
  assertEquals(redact({ config: '{"etcd_password":"p1",' }), { config: REDACTED });
  assertEquals(redact({ config: "plain words" }), { config: "plain words" });
});

Deno.test("an environment pair with a secret name loses its value", () => {
  assertEquals(redact([{ name: "REGISTRY_TOKEN", value: "v" }, { name: "HOME", value: "/" }]), [
    { name: "REGISTRY_TOKEN", value: REDACTED },
    { name: "HOME", value: "/" },
  ]);
});

Deno.test("free text loses secret values in every notation, and private keys", () => {
  assertEquals(
    scrubText('refused {"etcd_password":"p 1","x":2} token=abc api_key: k2 mode=bridge'),
    `refused {"etcd_password":"${REDACTED}","x":2} token=${REDACTED} api_key: ${REDACTED} mode=bridge`,
  );
  assertEquals(
    scrubText('msg "{\\"apiKey\\":\\"k3\\"}"'),
    `msg "{\\"apiKey\\":\\"${REDACTED}\\"}"`,
  );
  const pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----";
  assertEquals(scrubText(`before ${pem} after`), `before ${REDACTED} after`);
  assertEquals(redactText(`x\n${pem}\ny`), `x\n${REDACTED}\ny`);
});

Deno.test("a log of JSON lines is redacted line by line, a JSON file whole", () => {
  const log = [
    JSON.stringify({ level: "INFO", message: 'NAD conf {"etcd_password":"p2"}', apiKey: "k4" }),
    "a plain line password=p3",
  ].join("\n");
  const out = redactText(log);
  for (const s of ["p2", "k4", "p3"]) assert(!out.includes(s), `${s} left in ${out}`);
  assertEquals(out.split("\n").length, 2);
  assertEquals(JSON.parse(redactText('{"conf":{"ipam":{"etcd_password":"p"}}}')), {
    conf: { ipam: { etcd_password: REDACTED } },
  });
});

Deno.test("values nested past the bound are redacted whole, without a stack overflow", () => {
  let deep: unknown = { password: "p" };
  for (let i = 0; i < 20_000; i++) deep = { a: deep };
  const out = JSON.stringify(redact(deep));
  assert(!out.includes('"p"'), "the deep password");
  assertEquals(out.split('"a"').length - 1, MAX_REDACT_DEPTH + 1, "levels 0 to the bound walked");
});
