/**
 * Prometheus metrics (`prom-client`), served in the text format on the daemon's localhost HTTP
 * port (`/metrics`, next to `/healthz` and `/readyz` for the kubelet's probes). Events are counted
 * where they happen (requests, phases); state is read when scraped, from the collaborators handed
 * in (registry, watches, API counters, allocators, attachments, the reconcile loop).
 *
 * @module
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { AddPhase } from "./phase_stats.ts";

/** What a scrape reads. */
export interface MetricsSources {
  /** Pods in the registry. */
  pods?: () => number;
  /** Per watched resource: re-lists and watch (re)starts so far. */
  watches?: () => Record<string, { relists: number; watches: number }>;
  /** API requests answered so far, by `METHOD outcome` (`ok`, an HTTP status, `unreachable`). */
  apiRequests?: () => Record<string, number>;
  /** Addresses per range or block: in use and free. */
  addresses?: () => { range: string; used: number; free: number }[];
  /** Attachments per network. */
  attachments?: () => Record<string, number>;
  /** The reconcile loop's outcomes so far. */
  gc?: () => { released: number; failed: number; sweeps: number };
}

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * The daemon's metrics.
 *
 * @example
 * ```ts
 * const metrics = new FerryMetrics({ pods: () => registry.size });
 * metrics.request("ADD", 0, 12.5);
 * const text = await metrics.text();
 * ```
 */
export class FerryMetrics {
  readonly #registry = new Registry();
  readonly #requests: Counter<"command" | "code">;
  readonly #duration: Histogram<"command">;
  readonly #phases: Histogram<"phase">;

  /** Creates the metrics, reading state from `sources` at each scrape. */
  constructor(sources: MetricsSources = {}) {
    const registers = [this.#registry];
    this.#requests = new Counter({
      name: "ferry_cni_requests_total",
      help: "CNI requests served, by command and CNI code (0: success)",
      labelNames: ["command", "code"],
      registers,
    });
    this.#duration = new Histogram({
      name: "ferry_cni_request_duration_seconds",
      help: "CNI requests from arrival to answer, by command",
      labelNames: ["command"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#phases = new Histogram({
      name: "ferry_add_phase_duration_seconds",
      help: "Where ADD's time goes: turn (waiting for the container's lock), podWait, plug, " +
        "record, total",
      labelNames: ["phase"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    new Gauge({
      name: "ferry_registry_pods",
      help: "Pods of this node in the registry (from the pod watch)",
      registers,
      collect() {
        this.set(sources.pods?.() ?? 0);
      },
    });
    new Gauge({
      name: "ferry_watch_relists",
      help: "Lists made by each watch so far (first list and re-lists)",
      labelNames: ["resource"],
      registers,
      collect() {
        this.reset();
        for (const [resource, s] of Object.entries(sources.watches?.() ?? {})) {
          this.set({ resource }, s.relists);
        }
      },
    });
    new Gauge({
      name: "ferry_watch_starts",
      help: "Watch requests opened by each watch so far (restarts included)",
      labelNames: ["resource"],
      registers,
      collect() {
        this.reset();
        for (const [resource, s] of Object.entries(sources.watches?.() ?? {})) {
          this.set({ resource }, s.watches);
        }
      },
    });
    new Gauge({
      name: "ferry_api_requests",
      help: "Kubernetes API requests answered so far, by verb and code (ok, an HTTP status, " +
        "or unreachable)",
      labelNames: ["verb", "code"],
      registers,
      collect() {
        this.reset();
        for (const [key, n] of Object.entries(sources.apiRequests?.() ?? {})) {
          const [verb, code] = key.split(" ");
          this.set({ verb, code }, n);
        }
      },
    });
    new Gauge({
      name: "ferry_addresses",
      help: "Addresses of the default network per range or block, in use and free",
      labelNames: ["range", "state"],
      registers,
      collect() {
        this.reset();
        for (const r of sources.addresses?.() ?? []) {
          this.set({ range: r.range, state: "used" }, r.used);
          this.set({ range: r.range, state: "free" }, r.free);
        }
      },
    });
    new Gauge({
      name: "ferry_attachments",
      help: "Interfaces plugged on this node, by network",
      labelNames: ["network"],
      registers,
      collect() {
        this.reset();
        for (const [network, n] of Object.entries(sources.attachments?.() ?? {})) {
          this.set({ network }, n);
        }
      },
    });
    new Gauge({
      name: "ferry_gc_outcomes",
      help: "The IP reconcile loop so far: attachments released, releases given up, sweeps run",
      labelNames: ["outcome"],
      registers,
      collect() {
        const g = sources.gc?.();
        this.set({ outcome: "released" }, g?.released ?? 0);
        this.set({ outcome: "failed" }, g?.failed ?? 0);
        this.set({ outcome: "sweeps" }, g?.sweeps ?? 0);
      },
    });
  }

  /** Counts one CNI request and its duration (`code` 0 for success). */
  request(command: string, code: number, ms: number): void {
    this.#requests.inc({ command, code: String(code) });
    this.#duration.observe({ command }, ms / 1000);
  }

  /** Observes one ADD phase (ms). */
  phase(phase: AddPhase, ms: number): void {
    this.#phases.observe({ phase }, ms / 1000);
  }

  /** The text exposition format. */
  text(): Promise<string> {
    return this.#registry.metrics();
  }

  /** Its content type. */
  get contentType(): string {
    return this.#registry.contentType;
  }
}
