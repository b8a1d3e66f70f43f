// The bad-input corpus (`corpus.generated.json` from `generate.ts`, plus the hand-written
// `corpus.regressions.json`) against one running daemon: every shim invocation through the
// installed shim, every raw HTTP case straight onto the socket. Each case must get its documented
// outcome, the daemon must stay up, and nothing may change: no allocation, record, bridge port,
// link in the pod's namespace or host-local address. Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { netconf, withFerry } from "../../daemon/dev/harness.ts";
import { IS_ROOT, run, withMasterLink, withNetns, withTempDir } from "../../daemon/dev/netns.ts";
import { findPlugin } from "../../daemon/net/delegate.ts";
import { HEALTHZ_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { validateCniError } from "../../lib/_generated/validateCniError.js";
import {
  expand,
  type FuzzCase,
  generateCorpus,
  GENERATED_CORPUS,
  type HttpCase,
  renderCorpus,
  type ShimCase,
} from "./generate.ts";

const opts = { ignore: !IS_ROOT || !(await findPlugin("host-local", ["/usr/lib/cni"])) };

async function loadCorpus(): Promise<FuzzCase[]> {
  const generated = JSON.parse(await Deno.readTextFile(GENERATED_CORPUS)) as FuzzCase[];
  const regressions = JSON.parse(
    await Deno.readTextFile(new URL("./corpus.regressions.json", import.meta.url)),
  ) as FuzzCase[];
  return [...generated, ...regressions];
}

Deno.test("the committed corpus is what the generator writes (run `deno task fuzz:gen` if not)", async () => {
  assertEquals(await Deno.readTextFile(GENERATED_CORPUS), renderCorpus(generateCorpus()));
});

Deno.test("the corpus holds at least 300 cases with unique names", async () => {
  const corpus = await loadCorpus();
  assert(corpus.length >= 300, `${corpus.length} cases`);
  assertEquals(new Set(corpus.map((c) => c.name)).size, corpus.length);
});

/** Sends raw bytes and reads until the daemon closes: the status line and body. */
async function rawExchange(socket: string, raw: string): Promise<{ status: number; body: string }> {
  const conn = await Deno.connect({ transport: "unix", path: socket });
  try {
    if (raw) {
      await conn.write(new TextEncoder().encode(raw)).catch(() => 0);
    }
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(64 * 1024);
    const deadline = AbortSignal.timeout(10_000);
    while (!deadline.aborted) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
    const text = new TextDecoder().decode(
      chunks.reduce((a, b) => new Uint8Array([...a, ...b]), new Uint8Array()),
    );
    const [head, ...body] = text.split("\r\n\r\n");
    return { status: Number(head.split(" ")[1] ?? 0), body: body.join("\r\n\r\n") };
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

/** Runs `tasks` with at most `limit` at once. */
async function pool<T>(items: T[], limit: number, fn: (item: T) => Promise<void>) {
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) await fn(items[next++]);
  }));
}

Deno.test({
  name: "every corpus case gets its documented outcome, the daemon stays up and nothing changes",
  ...opts,
  fn: () =>
    withFerry(
      { config: { server: { readTimeoutSeconds: 1 } } },
      (ferry) =>
        withNetns(1, ([ns]) =>
          withMasterLink((master) =>
            withTempDir(async (dir) => {
              await run("mkfifo", `${dir}/fifo`);
              await Deno.writeTextFile(`${dir}/file`, "");
              await Deno.mkdir(`${dir}/dir`);
              const fill = (text: string) =>
                expand(text)
                  .replaceAll("{{NETNS}}", ns.path)
                  .replaceAll("{{PID}}", String(Deno.pid))
                  .replaceAll("{{FIFO}}", `${dir}/fifo`)
                  .replaceAll("{{FILE}}", `${dir}/file`)
                  .replaceAll("{{DIR}}", `${dir}/dir`)
                  .replaceAll("{{MASTER}}", master)
                  .replaceAll("{{HOSTLOCAL}}", `${dir}/host-local`);
              const corpus = await loadCorpus();
              const wrong: string[] = [];
              const shimCase = async (c: ShimCase) => {
                const env = Object.fromEntries(
                  Object.entries(c.env).map(([k, v]) => [k, fill(v)]),
                );
                const out = await ferry.shim(env, fill(c.stdin));
                const printed = out.json;
                const got = out.code === 0 ? { exit: 0 } : { exit: out.code, code: printed?.code };
                if (JSON.stringify(got) !== JSON.stringify(c.expect)) {
                  wrong.push(
                    `${c.name}: expected ${JSON.stringify(c.expect)}, got ${
                      out.stdout.trim().slice(0, 300)
                    } ${out.stderr.slice(0, 300)}`,
                  );
                } else if (out.code !== 0 && !validateCniError(printed)) {
                  wrong.push(`${c.name}: not a spec error object: ${out.stdout.slice(0, 200)}`);
                }
              };
              const httpCase = async (c: HttpCase) => {
                const filled = fill(c.raw);
                const body = filled.slice(filled.indexOf("\r\n\r\n") + 4);
                const raw = filled.replace(
                  "{{LENGTH}}",
                  String(new TextEncoder().encode(body).length),
                );
                const res = await rawExchange(ferry.config.socket, raw);
                let code: number | undefined;
                try {
                  code = JSON.parse(res.body)?.error?.code;
                } catch { /* not JSON */ }
                const got = c.expect.code === undefined
                  ? { status: res.status }
                  : { status: res.status, code };
                if (JSON.stringify(got) !== JSON.stringify(c.expect)) {
                  wrong.push(
                    `${c.name}: expected ${JSON.stringify(c.expect)}, got ${res.status} ${
                      res.body.slice(0, 300)
                    }`,
                  );
                }
              };
              await pool(corpus, 4, (c) => c.kind === "shim" ? shimCase(c) : httpCase(c));
              assertEquals(wrong, []);
              // Still serving, and nothing changed.
              const health = await unixRequest(
                ferry.config.socket,
                "GET",
                HEALTHZ_PATH,
                undefined,
                AbortSignal.timeout(2000),
              );
              assertEquals(health.status, 200);
              assertEquals(await ferry.allocations(), []);
              assertEquals(await ferry.records(), []);
              const ports = await run(
                "ip",
                "-j",
                "link",
                "show",
                "master",
                ferry.config.network.bridge,
              );
              assertEquals(JSON.parse(ports.trim() || "[]"), []);
              const links = JSON.parse(await run("ip", "-n", ns.name, "-j", "link", "show")) as {
                ifname: string;
              }[];
              assertEquals(links.map((l) => l.ifname), ["lo"]);
              const held: string[] = [];
              const networks = await Array.fromAsync(Deno.readDir(`${dir}/host-local`))
                .catch(() => []);
              for (const e of networks) {
                for await (const f of Deno.readDir(`${dir}/host-local/${e.name}`)) {
                  if (/^\d+\.\d+\.\d+\.\d+$/.test(f.name)) held.push(f.name);
                }
              }
              assertEquals(held, []);
              assertEquals(await run("ip", "link", "show", master).then(() => true), true);
              // And a good request is still served.
              const good = await ferry.shim(
                {
                  CNI_COMMAND: "ADD",
                  CNI_CONTAINERID: "fuzzgood",
                  CNI_NETNS: ns.path,
                  CNI_IFNAME: "eth0",
                  CNI_PATH: "/usr/lib/cni",
                },
                netconf(),
              );
              assertEquals(good.code, 0, good.stdout);
            })
          )),
    ),
});
