// The daemon's localhost TCP port: /healthz and /readyz for the kubelet's probes, /metrics in the
// Prometheus text format with the names operators scrape. Needs root (the daemon plugs pods).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cniEnv, netconf, withFerry } from "../../daemon/dev/harness.ts";
import { IS_ROOT, withNetns } from "../../daemon/dev/netns.ts";

Deno.test({
  name:
    "probes answer on the TCP port and /metrics counts requests, phases, addresses and attachments",
  ignore: !IS_ROOT,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const base = `http://${ferry.daemon().httpAddress}`;
        for (const path of ["/healthz", "/readyz"]) {
          const res = await fetch(base + path);
          assertEquals([res.status, (await res.text()).trim()], [200, "ok"], path);
        }
        const add = await ferry.shim(cniEnv("ADD", ns, "cmetrics1", "eth0"), netconf());
        assertEquals(add.code, 0, add.stdout);
        const bad = await ferry.shim(cniEnv("CHECK", ns, "cnone", "eth0"), netconf());
        assertEquals(bad.code, 1);
        const res = await fetch(`${base}/metrics`);
        assertEquals(res.status, 200);
        assert(res.headers.get("content-type")?.startsWith("text/plain"));
        const text = await res.text();
        for (
          const line of [
            'ferry_cni_requests_total{command="ADD",code="0"} 1',
            'ferry_cni_requests_total{command="CHECK",code="3"} 1',
            'ferry_add_phase_duration_seconds_count{phase="plug"} 1',
            'ferry_add_phase_duration_seconds_count{phase="ipam"} 1',
            'ferry_add_phase_duration_seconds_count{phase="total"} 1',
            'ferry_attachments{network="ferry"} 1',
            "ferry_ipam_conflicts 0",
            "ferry_ipam_leaked_addresses 0",
          ]
        ) {
          assert(text.includes(line), `${line} in\n${text}`);
        }
        assert(
          /ferry_cni_request_duration_seconds_bucket\{command="ADD",le="0.005"\} [01]\n/.test(text),
          text,
        );
        assert(
          text.includes('ferry_cni_request_duration_seconds_bucket{command="ADD",le="+Inf"} 1\n'),
        );
        assert(/ferry_addresses\{range="[^"]+",state="used"\} 1/.test(text), text);
        assert(/ferry_addresses\{range="[^"]+",state="free"\} \d+/.test(text), text);
        assertEquals((await ferry.shim(cniEnv("DEL", ns, "cmetrics1", "eth0"), netconf())).code, 0);
        assertEquals((await fetch(`${base}/nope`)).status, 404);
      })),
});

Deno.test({
  name:
    "the scrapers' port is a listener of its own: with every one of its connections taken, the probes on localhost still answer",
  ignore: !IS_ROOT,
  fn: () =>
    withFerry({
      config: { server: { metricsHost: "127.0.0.1", metricsPort: 0, maxConnections: 4 } },
    }, async (ferry) => {
      const { httpAddress, metricsAddress } = ferry.daemon();
      assert(metricsAddress && metricsAddress !== httpAddress, `${metricsAddress}`);
      const scraped = await fetch(`http://${metricsAddress}/metrics`);
      assertEquals(scraped.status, 200);
      assert((await scraped.text()).includes("ferry_cni_requests_total"));
      // Clients that connect to the scrapers' port and send nothing hold all its connections.
      const [host, port] = metricsAddress!.split(":");
      const held = await Promise.all(
        Array.from({ length: 6 }, () => Deno.connect({ hostname: host, port: Number(port) })),
      );
      try {
        const probe = await fetch(`http://${httpAddress}/readyz`);
        assertEquals([probe.status, (await probe.text()).trim()], [200, "ok"]);
      } finally {
        for (const c of held) c.close();
      }
    }),
});

Deno.test({
  name:
    "the scrapers' port leaves out the network (NAD) and pod names unless the scraper sends server.metricsDetailTokenFile's token; a wrong token is 401; localhost keeps them",
  ignore: !IS_ROOT,
  fn: async () => {
    const tokenFile = await Deno.makeTempFile({ prefix: "ferry-metrics-token-" });
    try {
      await Deno.writeTextFile(tokenFile, "a-scraper-token\n");
      await withFerry({
        config: {
          server: { metricsHost: "127.0.0.1", metricsPort: 0, metricsDetailTokenFile: tokenFile },
        },
      }, (ferry) =>
        withNetns(1, async ([ns]) => {
          const { httpAddress, metricsAddress } = ferry.daemon();
          const add = await ferry.shim(cniEnv("ADD", ns, "cmtoken1", "eth0"), netconf());
          assertEquals(add.code, 0, add.stdout);
          const scrape = async (address: string, authorization?: string) => {
            const res = await fetch(`http://${address}/metrics`, {
              headers: authorization ? { authorization } : {},
              signal: AbortSignal.timeout(10_000),
            });
            return { status: res.status, text: await res.text() };
          };
          const anonymous = await scrape(metricsAddress!);
          assertEquals(anonymous.status, 200);
          assert(anonymous.text.includes("\nferry_attachments 1\n"), anonymous.text);
          assert(!anonymous.text.includes("network="), `no network names:\n${anonymous.text}`);
          const scraper = await scrape(metricsAddress!, "Bearer a-scraper-token");
          assertEquals(scraper.status, 200);
          assert(scraper.text.includes('ferry_attachments{network="ferry"} 1'), scraper.text);
          const wrong = await scrape(metricsAddress!, "Bearer not-the-token");
          assertEquals([wrong.status, wrong.text], [401, "unauthorized\n"]);
          const local = await scrape(httpAddress!);
          assert(local.text.includes('ferry_attachments{network="ferry"} 1'), local.text);
          // A rotated token takes effect at the next scrape.
          await Deno.writeTextFile(tokenFile, "the-next-token\n");
          assertEquals((await scrape(metricsAddress!, "Bearer a-scraper-token")).status, 401);
          assertEquals((await scrape(metricsAddress!, "Bearer the-next-token")).status, 200);
          assertEquals(
            (await ferry.shim(cniEnv("DEL", ns, "cmtoken1", "eth0"), netconf())).code,
            0,
          );
        }));
    } finally {
      await Deno.remove(tokenFile).catch(() => {});
    }
  },
});
