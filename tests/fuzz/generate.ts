/**
 * `deno task fuzz:gen`: writes `tests/fuzz/corpus.generated.json`, the generated bad-input corpus
 * (CNI variables, stdin configs, prevResults, attachments, raw HTTP to the socket), each case with
 * its documented outcome. `fuzz_test.ts` fails when the committed file differs from what this
 * generates, so the rules below are the documentation; defects found later go, hand-written, into
 * `corpus.regressions.json`.
 *
 * Placeholders, filled in by the runner: `{{NETNS}}` a pod namespace, `{{PID}}` the daemon's
 * process, `{{FIFO}}`, `{{FILE}}`, `{{DIR}}` a FIFO, a regular file and a directory, `{{MASTER}}`
 * a host link (a macvlan master that carries no traffic), `{{HOSTLOCAL}}` a host-local data dir,
 * `{{LENGTH}}` the byte length of the body once the others are filled in;
 * `«c*N»` is the character `c` repeated N times (long inputs stay short in the file).
 *
 * @module
 */

/** A shim invocation and what it must answer. */
export interface ShimCase {
  /** What it tries. */
  name: string;
  /** Through the installed shim. */
  kind: "shim";
  /** The whole environment. */
  env: Record<string, string>;
  /** Stdin. */
  stdin: string;
  /** Exit status and, on failure, the CNI error code printed. */
  expect: { exit: number; code?: number };
}

/** Raw bytes to the daemon's socket and what must come back. */
export interface HttpCase {
  /** What it tries. */
  name: string;
  /** Raw on the socket. */
  kind: "http";
  /** The bytes sent (the connection then stays open until the daemon answers). */
  raw: string;
  /** HTTP status and, where the body is a CNI reply, its error code. */
  expect: { status: number; code?: number };
}

/** One case of the corpus. */
export type FuzzCase = ShimCase | HttpCase;

const BASE_ENV = {
  CNI_CONTAINERID: "fuzzc0ffee",
  CNI_NETNS: "{{NETNS}}",
  CNI_IFNAME: "eth0",
  CNI_PATH: "/usr/lib/cni:/opt/cni/bin",
  CNI_ARGS: "IgnoreUnknown=1",
};
const conf = (extra: Record<string, unknown> = {}, version = "1.0.0") =>
  JSON.stringify({ cniVersion: version, name: "fuzz", type: "ferry", ...extra });

function shim(
  name: string,
  command: string,
  env: Record<string, string | undefined>,
  stdin: string,
  expect: ShimCase["expect"],
): ShimCase {
  const full: Record<string, string> = {};
  for (const [k, v] of Object.entries({ CNI_COMMAND: command, ...BASE_ENV, ...env })) {
    if (v !== undefined) full[k] = v;
  }
  return { name, kind: "shim", env: full, stdin, expect };
}

const fail = (code: number) => ({ exit: 1, code });
const OK = { exit: 0 };

function commands(): FuzzCase[] {
  const bad = ["", "add", "Add", "UPDATE", "ADD ", " ADD", "ADD\n", "VERSIONX", "DELETE", "status"];
  return bad.map((c) => shim(`CNI_COMMAND ${JSON.stringify(c)}`, c, {}, conf(), fail(4)));
}

function missing(): FuzzCase[] {
  const needs: Record<string, string[]> = {
    ADD: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
    CHECK: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
    DEL: ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
  };
  return Object.entries(needs).flatMap(([command, vars]) =>
    vars.map((v) => shim(`${command} without ${v}`, command, { [v]: undefined }, conf(), fail(4)))
  );
}

function containerIds(): FuzzCase[] {
  const bad = [
    "-abc",
    ".abc",
    "_abc",
    "a b",
    "a/b",
    "../etc",
    "a;b",
    "a\tb",
    "a\nb",
    "ä",
    "a:b",
    "a*b",
    "$(id)",
    "a".repeat(201),
    "a".repeat(5000),
  ];
  return ["ADD", "DEL", "CHECK"].flatMap((command) =>
    bad.map((id) =>
      shim(
        `${command} with CNI_CONTAINERID ${JSON.stringify(id.slice(0, 20))} (${id.length})`,
        command,
        { CNI_CONTAINERID: id },
        conf(),
        fail(4),
      )
    )
  );
}

function ifnames(): FuzzCase[] {
  const bad = [
    ".",
    "..",
    "a/b",
    "a:b",
    "a b",
    "a".repeat(16),
    "ä".repeat(8),
    "eth0\n",
    "\teth0",
    "../x",
  ];
  return ["ADD", "DEL", "CHECK"].flatMap((command) =>
    bad.map((ifname) =>
      shim(
        `${command} with CNI_IFNAME ${JSON.stringify(ifname)}`,
        command,
        { CNI_IFNAME: ifname },
        conf(),
        fail(4),
      )
    )
  );
}

function namespaces(): FuzzCase[] {
  // Never a path that could be a pod's: malformed, the daemon's own, or not a namespace file.
  const malformed = ["netns", "var/run/netns/x", "/a b", "/a\nb", "/" + "a".repeat(5000)];
  const own = ["/proc/self/ns/net", "/proc/{{PID}}/ns/net", "/proc/thread-self/ns/net"];
  const notNs = ["/dev/null", "/etc/hostname", "{{FIFO}}", "{{FILE}}", "{{DIR}}"];
  const gone = ["/var/run/netns/fyt-fuzz-missing"];
  const out: FuzzCase[] = [];
  const each = (paths: string[], command: string, expect: ShimCase["expect"], why: string) => {
    for (const p of paths) {
      out.push(
        shim(
          `${command} with CNI_NETNS ${JSON.stringify(p.slice(0, 30))}: ${why}`,
          command,
          { CNI_NETNS: p },
          conf(),
          expect,
        ),
      );
    }
  };
  each([...malformed, ...own, ...notNs, ...gone], "ADD", fail(4), "refused before plumbing");
  each([...malformed, ...own, ...notNs], "CHECK", fail(4), "refused before plumbing");
  each(gone, "CHECK", fail(3), "nothing recorded for it");
  each([...malformed, ...own], "DEL", fail(4), "refused");
  each([...notNs, ...gone], "DEL", OK, "treated as gone, nothing to release");
  return out;
}

function cniArgs(): FuzzCase[] {
  const bad = ["a", "=b", "K8S_POD_NAME", ";=;", "a=b;c", "="];
  return ["ADD", "DEL"].flatMap((command) =>
    bad.map((args) =>
      shim(
        `${command} with CNI_ARGS ${JSON.stringify(args)}`,
        command,
        { CNI_ARGS: args },
        conf(),
        fail(4),
      )
    )
  );
}

function cniPaths(): FuzzCase[] {
  return ["bin", ".", "relative/dir", "/usr/lib/cni:bin"].map((p) =>
    shim(
      `ADD with CNI_PATH ${JSON.stringify(p)}: only absolute directories`,
      "ADD",
      { CNI_PATH: p },
      conf(),
      fail(4),
    )
  );
}

function stdins(): FuzzCase[] {
  const out: FuzzCase[] = [];
  const notJson = [
    "",
    " ",
    "{",
    "}",
    "nul",
    "[",
    '{"a":}',
    "{'a':1}",
    "1e999x",
    '{"cniVersion":"1.0.0"',
    "{".repeat(200000),
  ];
  for (const s of notJson) {
    out.push(shim(`stdin ${JSON.stringify(s.slice(0, 20))} is not JSON`, "ADD", {}, s, fail(6)));
  }
  for (const s of ["null", "[]", "42", '"s"', "true"]) {
    out.push(shim(`stdin ${s} is not an object`, "ADD", {}, s, fail(6)));
  }
  const versions: unknown[] = [
    undefined,
    "0.1.0",
    "0.2.0",
    "9.9.9",
    "1.0",
    "",
    1,
    null,
    ["1.0.0"],
    "1.0.0 ",
    "v1.0.0",
  ];
  for (const v of versions) {
    for (const command of ["ADD", "DEL"]) {
      out.push(
        shim(
          `${command} with cniVersion ${JSON.stringify(v)}`,
          command,
          {},
          JSON.stringify({ cniVersion: v, name: "fuzz", type: "ferry" }),
          fail(1),
        ),
      );
    }
  }
  for (
    const [command, v] of [
      ["CHECK", "0.3.0"],
      ["CHECK", "0.3.1"],
      ["STATUS", "1.0.0"],
      ["STATUS", "0.4.0"],
      ["GC", "1.0.0"],
      ["GC", "0.3.1"],
    ]
  ) {
    out.push(
      shim(`${command} needs a newer cniVersion than ${v}`, command, {}, conf({}, v), fail(1)),
    );
  }
  const schema: [string, Record<string, unknown>][] = [
    ["no name", { name: undefined }],
    ["an empty name", { name: "" }],
    ["a name with a space", { name: "a b" }],
    ["a name starting with a dash", { name: "-a" }],
    ["a numeric name", { name: 5 }],
    ["no type", { type: undefined }],
    ["an empty type", { type: "" }],
    ["a type with a slash", { type: "a/b" }],
    ["ipam that is a string", { ipam: "x" }],
    ["ipam without a type", { ipam: {} }],
    ["ipam with a numeric type", { ipam: { type: 5 } }],
    ["dns that is a string", { dns: "x" }],
    ["dns nameservers that are a string", { dns: { nameservers: "x" } }],
    ["capabilities that are a list", { capabilities: [] }],
    ["a capability that is not a boolean", { capabilities: { a: "x" } }],
    ["runtimeConfig that is a list", { runtimeConfig: [] }],
    ["args that are a string", { args: "x" }],
    ["a prevResult that is a string", { prevResult: "x" }],
    ["a prevResult without cniVersion", { prevResult: {} }],
  ];
  for (const [what, extra] of schema) {
    const body = { cniVersion: "1.0.0", name: "fuzz", type: "ferry", ...extra };
    out.push(shim(`a config with ${what}`, "ADD", {}, JSON.stringify(body), fail(7)));
  }
  for (const t of [1e308, 2 ** 31, 3601, 0, -5, "10", null, true, [], {}]) {
    out.push(
      shim(`timeoutSeconds ${JSON.stringify(t)}`, "ADD", {}, conf({ timeoutSeconds: t }), fail(7)),
    );
  }
  out.push(
    shim(
      "a 2 MiB config is over the daemon's request limit",
      "ADD",
      {},
      conf({ args: { pad: "x".repeat(2 * 1024 * 1024) } }),
      fail(6),
    ),
  );
  return out;
}

function prevResults(): FuzzCase[] {
  const prev = (p: Record<string, unknown>) => ({
    prevResult: { cniVersion: "1.0.0", interfaces: [{ name: "eth0" }], ips: [], ...p },
  });
  const cases: [string, Record<string, unknown>, number][] = [
    ["an IP on interface 99", { ips: [{ address: "10.0.0.2/24", interface: 99 }] }, 7],
    ["an IP on interface -1", { ips: [{ address: "10.0.0.2/24", interface: -1 }] }, 7],
    ["an IP on interface 1 of 1", { ips: [{ address: "10.0.0.2/24", interface: 1 }] }, 7],
    ["cniVersion 0.1.0", { cniVersion: "0.1.0" }, 1],
    ["cniVersion 9", { cniVersion: "9" }, 1],
    ["an address that is no address", { ips: [{ address: "x" }] }, 7],
    ["an address without a prefix", { ips: [{ address: "10.0.0.2" }] }, 7],
    ["ips that are not a list", { ips: "x" }, 7],
    ["an interface without a name", { interfaces: [{}] }, 7],
    ["a route to nowhere", { routes: [{ dst: "x" }] }, 7],
    ["a route without dst", { routes: [{}] }, 7],
    ["dns that is a string", { dns: "x" }, 7],
    ["a gateway that is no address", { ips: [{ address: "10.0.0.2/24", gateway: "x" }] }, 7],
  ];
  return ["ADD", "CHECK"].flatMap((command) =>
    cases.map(([what, p, code]) =>
      shim(`${command} with a prevResult with ${what}`, command, {}, conf(prev(p)), fail(code))
    )
  );
}

function attachments(): FuzzCase[] {
  const hostLocal = {
    type: "host-local",
    ranges: [[{ subnet: "172.31.250.0/24" }]],
    dataDir: "{{HOSTLOCAL}}",
  };
  const cases: [string, unknown, number][] = [
    ["null", null, 7],
    ["a list", [], 7],
    ["a string", "macvlan", 7],
    ["a number", 5, 7],
    ["no type", {}, 7],
    ["a numeric type", { type: 5 }, 7],
    ["type ferry itself", { type: "ferry" }, 7],
    ["a macvlan master with a space", { type: "macvlan", master: "a b" }, 7],
    ["a macvlan mode that does not exist", { type: "macvlan", mode: "x" }, 7],
    ["a macvlan MTU of 10", { type: "macvlan", mtu: 10 }, 7],
    ["a macvlan MTU that is a string", { type: "macvlan", mtu: "x" }, 7],
    ["an ipvlan in bridge mode", { type: "ipvlan", mode: "bridge" }, 7],
    ["a macvlan MAC that is no MAC", { type: "macvlan", runtimeConfig: { mac: "zz" } }, 7],
    ["a plugin that is not installed", { type: "nope-plugin" }, 7],
    ["a plugin path outside CNI_PATH", { type: "../../bin/sh" }, 7],
    ["a plugin path with a slash", { type: "bin/sh" }, 7],
    ["an IPAM plugin that is not installed", {
      type: "macvlan",
      master: "{{MASTER}}",
      ipam: { type: "nope" },
    }, 7],
    ["an IPAM plugin path outside CNI_PATH", {
      type: "macvlan",
      master: "{{MASTER}}",
      ipam: { type: "../../bin/sh" },
    }, 7],
    [
      "a master that does not exist",
      { type: "macvlan", master: "fynomaster0", ipam: hostLocal },
      5,
    ],
    ["an interface name taken in the pod (lo)", {
      type: "macvlan",
      master: "{{MASTER}}",
      ipam: hostLocal,
    }, 5],
  ];
  return cases.map(([what, attachment, code]) =>
    shim(
      `an attachment: ${what}`,
      "ADD",
      what.includes("(lo)") ? { CNI_IFNAME: "lo" } : {},
      conf({ name: "fuzzlan", attachment }),
      fail(code),
    )
  );
}

const request = (
  command: string,
  over: Record<string, unknown> = {},
  config: Record<string, unknown> = {},
) =>
  JSON.stringify({
    command,
    containerId: "fuzzraw1",
    netns: "{{NETNS}}",
    ifname: "eth0",
    args: {},
    path: ["/usr/lib/cni"],
    config: { cniVersion: "1.0.0", name: "fuzz", type: "ferry", ...config },
    ...over,
  });

function post(path: string, body: string, extraHead = ""): string {
  return `POST ${path} HTTP/1.1\r\nHost: ferry\r\n${extraHead}Content-Length: {{LENGTH}}\r\n\r\n${body}`;
}

function http(): FuzzCase[] {
  const h = (name: string, raw: string, status: number, code?: number): HttpCase => ({
    name,
    kind: "http",
    raw,
    expect: code === undefined ? { status } : { status, code },
  });
  const get = (line: string) => `${line}\r\nHost: ferry\r\n\r\n`;
  return [
    h("GET /", get("GET / HTTP/1.1"), 404),
    h("GET /v1", get("GET /v1 HTTP/1.1"), 404),
    h("GET /v1/cni/", get("GET /v1/cni/ HTTP/1.1"), 404),
    h("GET /v1/cni?x=1", get("GET /v1/cni?x=1 HTTP/1.1"), 405),
    h("GET /../etc/passwd", get("GET /../etc/passwd HTTP/1.1"), 404),
    h("GET //v1/cni", get("GET //v1/cni HTTP/1.1"), 404),
    h("GET /%2e%2e/etc/passwd", get("GET /%2e%2e/etc/passwd HTTP/1.1"), 404),
    h("POST /healthz", post("/healthz", "{}"), 405),
    h("PUT /v1/cni", post("/v1/cni", "{}").replace("POST", "PUT"), 405),
    h("DELETE /v1/cni", get("DELETE /v1/cni HTTP/1.1"), 405),
    h("PATCH /v1/stats", post("/v1/stats", "{}").replace("POST", "PATCH"), 405),
    h("OPTIONS /v1/cni", get("OPTIONS /v1/cni HTTP/1.1"), 405),
    h("HEAD /healthz", get("HEAD /healthz HTTP/1.1"), 405),
    h("TRACE /v1/cni (a forbidden method)", get("TRACE /v1/cni HTTP/1.1"), 400, 6),
    h("CONNECT (a forbidden method)", get("CONNECT /v1/cni HTTP/1.1"), 400, 6),
    h("a method with @", get("G@T /healthz HTTP/1.1"), 400, 6),
    h("a request line of garbage", "GARBAGE\r\n\r\n", 400, 6),
    h("no HTTP version", "GET /healthz\r\n\r\n", 400, 6),
    h("HTTP/2.0", get("GET /healthz HTTP/2.0"), 400, 6),
    h("HTTP/0.9", "GET /healthz\r\n\r\n", 400, 6),
    h("a leading space", get(" GET /healthz HTTP/1.1"), 400, 6),
    h("an absolute-form target", get("GET http://ferry/healthz HTTP/1.1"), 400, 6),
    h("a header without a colon", "GET /healthz HTTP/1.1\r\nHost\r\n\r\n", 400, 6),
    h("a header name with a space", "GET /healthz HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, 6),
    h("a folded header", "GET /healthz HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, 6),
    h(
      "two Content-Lengths",
      "POST /v1/cni HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 2\r\n\r\n{}",
      400,
      6,
    ),
    h("Content-Length abc", "POST /v1/cni HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, 6),
    h("Content-Length -1", "POST /v1/cni HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, 6),
    h("Content-Length 1e3", "POST /v1/cni HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400, 6),
    h("Content-Length 0x10", "POST /v1/cni HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400, 6),
    h(
      "Content-Length and Transfer-Encoding",
      "POST /v1/cni HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
      400,
      6,
    ),
    h("Transfer-Encoding gzip", "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, 6),
    h(
      "Transfer-Encoding chunked, gzip",
      "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
      501,
      6,
    ),
    h(
      "a chunk size that is no number",
      "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      400,
      6,
    ),
    h(
      "a chunk size of 9 digits",
      "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n100000000\r\n",
      400,
      6,
    ),
    h(
      "a chunk without its CRLF",
      "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
      400,
      6,
    ),
    h(
      "chunks over the body limit",
      "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n100001\r\n",
      413,
      6,
    ),
    h("a 20 KiB head", `GET /healthz HTTP/1.1\r\nX: ${"a".repeat(20 * 1024)}\r\n\r\n`, 431, 6),
    h(
      "a declared 2 MiB body",
      "POST /v1/cni HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n{}",
      413,
      6,
    ),
    h("nothing at all (slow client)", "", 408, 6),
    h("half a head (slow client)", "POST /v1/cni HTTP/1.1\r\nHost: f", 408, 6),
    h(
      "half a body (slow client)",
      'POST /v1/cni HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"command"',
      408,
      6,
    ),
    h("LF-only line ends (never a complete head)", "GET /healthz HTTP/1.1\n\n", 408, 6),
    h("a body that is not JSON", post("/v1/cni", "{"), 400, 6),
    h("a body that is a list", post("/v1/cni", "[]"), 400, 6),
    h("a body without config", post("/v1/cni", '{"command":"ADD"}'), 400, 6),
    h("a body that is null", post("/v1/cni", "null"), 400, 6),
    h(
      "ADD with cniVersion 0.2.0",
      post("/v1/cni", request("ADD", {}, { cniVersion: "0.2.0" })),
      400,
      1,
    ),
    h(
      "DEL with cniVersion 9.9.9",
      post("/v1/cni", request("DEL", {}, { cniVersion: "9.9.9" })),
      400,
      1,
    ),
    h(
      "CHECK with cniVersion 0.3.1",
      post("/v1/cni", request("CHECK", {}, { cniVersion: "0.3.1" })),
      400,
      1,
    ),
    h(
      "GC with cniVersion 1.0.0",
      post("/v1/cni", request("GC", {}, { cniVersion: "1.0.0" })),
      400,
      1,
    ),
    h(
      "a netns with a newline",
      post("/v1/cni", request("ADD", { netns: "/var/run/netns/a\n" })),
      400,
      4,
    ),
    h(
      "a netns with a space",
      post("/v1/cni", request("ADD", { netns: "/var/run/netns/a b" })),
      400,
      4,
    ),
    h(
      "a 5000-character container ID",
      post("/v1/cni", request("ADD", { containerId: "a".repeat(5000) })),
      400,
      4,
    ),
    h("command VERSION (the shim's own)", post("/v1/cni", request("VERSION")), 400, 4),
    h("command add", post("/v1/cni", request("add")), 400, 4),
    h("an unknown field", post("/v1/cni", request("ADD", { extra: 1 })), 400, 4),
    h("args that are a list", post("/v1/cni", request("ADD", { args: [] })), 400, 4),
    h("a path that is a string", post("/v1/cni", request("ADD", { path: "/usr/lib/cni" })), 400, 4),
    h("a relative path entry", post("/v1/cni", request("ADD", { path: ["bin"] })), 400, 4),
    h(
      "ADD without a container ID",
      post("/v1/cni", request("ADD", { containerId: undefined })),
      400,
      4,
    ),
    h("ADD without a netns", post("/v1/cni", request("ADD", { netns: undefined })), 400, 4),
    h("CHECK without an ifname", post("/v1/cni", request("CHECK", { ifname: undefined })), 400, 4),
    h(
      "a prevResult naming interface 99",
      post(
        "/v1/cni",
        request("ADD", {}, {
          prevResult: { cniVersion: "1.0.0", ips: [{ address: "10.0.0.2/24", interface: 99 }] },
        }),
      ),
      400,
      7,
    ),
    h(
      "a prevResult of version 0.1.0",
      post("/v1/cni", request("ADD", {}, { prevResult: { cniVersion: "0.1.0" } })),
      400,
      1,
    ),
    h("a config name with a space", post("/v1/cni", request("ADD", {}, { name: "a b" })), 400, 7),
    h(
      "timeoutSeconds 1e308",
      post("/v1/cni", request("ADD", {}, { timeoutSeconds: 1e308 })),
      400,
      7,
    ),
    h(
      "ADD into the daemon's own namespace",
      post("/v1/cni", request("ADD", { netns: "/proc/self/ns/net" })),
      400,
      4,
    ),
    h(
      "a macvlan DEL in the daemon's own namespace naming a node link",
      post(
        "/v1/cni",
        request("DEL", { netns: "/proc/self/ns/net", ifname: "{{MASTER}}" }, {
          attachment: { type: "macvlan", master: "{{MASTER}}" },
        }),
      ),
      400,
      4,
    ),
    h("ADD into a FIFO", post("/v1/cni", request("ADD", { netns: "{{FIFO}}" })), 400, 4),
    h("CHECK of a container never plugged", post("/v1/cni", request("CHECK")), 404, 3),
  ];
}

/** Writes runs of one character longer than 64 as `«c*N»`. */
export function compact(text: string): string {
  return text.replace(/(.)\1{64,}/gs, (run, c) => `«${c}*${run.length}»`);
}

/** Expands `«c*N»` again. */
export function expand(text: string): string {
  return text.replace(/«(.)\*(\d+)»/gs, (_, c, n) => c.repeat(Number(n)));
}

/** The whole generated corpus. */
export function generateCorpus(): FuzzCase[] {
  return [
    ...commands(),
    ...missing(),
    ...containerIds(),
    ...ifnames(),
    ...namespaces(),
    ...cniArgs(),
    ...cniPaths(),
    ...stdins(),
    ...prevResults(),
    ...attachments(),
    ...http(),
  ];
}

/** The corpus file's text: one case per line, long runs compacted. */
export function renderCorpus(corpus: FuzzCase[]): string {
  return "[\n" + corpus.map((c) => compact(JSON.stringify(c))).join(",\n") + "\n]\n";
}

/** Where the generated corpus is kept. */
export const GENERATED_CORPUS = new URL("./corpus.generated.json", import.meta.url);

if (import.meta.main) {
  const corpus = generateCorpus();
  await Deno.writeTextFile(GENERATED_CORPUS, renderCorpus(corpus));
  console.log(`wrote ${corpus.length} cases to ${GENERATED_CORPUS.pathname}`);
}
