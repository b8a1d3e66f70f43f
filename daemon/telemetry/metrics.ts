/**
 * Prometheus metrics, served in the text format on the daemon's localhost HTTP port (`/metrics`,
 * next to `/healthz` and `/readyz` for the kubelet's probes). Events are counted where they
 * happen (requests, phases); state is read when scraped, from the collaborators handed in
 * (registry, watches, API counters, allocators, attachments, the reconcile loop).
 *
 * @module
 */
import {
  Counter,
  exposition,
  Gauge,
  Histogram,
  type Labels,
  type MetricFamily,
  PROMETHEUS_CONTENT_TYPE,
} from "./prometheus.ts";
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
  /** The node's own `ipam check` after the last sweep. */
  ipamCheck?: () => {
    conflicts: number;
    leaked: number;
    networks?: { network: string; conflicts: number; leaked: number }[];
  };
  /** NetworkPolicy: packets counted by each rule of the policy table. */
  policyRules?: () => { comment: string; packets: number }[];
  /** Other nodes' pod ranges this node cannot route now. */
  unroutableRanges?: () => number;
  /** (Multi)NetworkPolicy: what was refused or failed, by the policy kind and the problem. */
  policyProblems?: () => { kind: string; problem: string; count: number }[];
  /** NetworkPolicy: the policies the size limits refuse now, by `namespace/name`. */
  policyRefused?: () => string[];
  /** Port security: frames dropped per pod and kind of forgery. */
  spoofed?: () => { namespace: string; pod: string; kind: string; packets: number }[];
}

/**
 * Samples with equal labels added up: one policy rule is several nft rules (a family, a peer, a
 * pod of the node each), and a series may appear once.
 */
function summed(samples: [Labels, number][]): [Labels, number][] {
  const by = new Map<string, [Labels, number]>();
  for (const [labels, n] of samples) {
    const key = JSON.stringify(Object.entries(labels).sort());
    const known = by.get(key);
    if (known) known[1] += n;
    else by.set(key, [labels, n]);
  }
  return [...by.values()];
}

/**
 * Labels that name a tenant's objects: namespaces (`namespace`), pods (`pod`), NetworkPolicies
 * (`policy`, and the `rule` of one), NADs (`network`). The scrapers' port leaves them out unless
 * the scraper shows the detail token (`server.metricsDetailTokenFile`).
 */
export const TENANT_LABELS: ReadonlySet<string> = new Set([
  "namespace",
  "pod",
  "policy",
  "rule",
  "network",
]);

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * The daemon's metrics.
 *
 * @example
 * ```ts
 * const metrics = new FerryMetrics({ pods: () => registry.size });
 * metrics.request("ADD", 0, 12.5);
 * const text = metrics.text();
 * ```
 */
export class FerryMetrics {
  readonly #requests = new Counter(
    "ferry_cni_requests_total",
    "CNI requests served, by command and CNI code (0: success)",
    ["command", "code"],
  );
  readonly #abandoned = new Counter(
    "ferry_cni_abandoned_total",
    "CNI requests abandoned by their requester (its shim timed out and hung up before the " +
      "answer) and rolled back, by command",
    ["command"],
  );
  readonly #duration = new Histogram(
    "ferry_cni_request_duration_seconds",
    "CNI requests from arrival to answer, by command",
    ["command"],
    LATENCY_BUCKETS,
  );
  readonly #phases = new Histogram(
    "ferry_add_phase_duration_seconds",
    "Where ADD's time goes: turn (waiting for the container's lock), podWait, plug (of which " +
      "ipam: allocating addresses), record, total",
    ["phase"],
    LATENCY_BUCKETS,
  );
  readonly #api = new Histogram(
    "ferry_api_request_duration_seconds",
    "Kubernetes API requests (watch streams aside) from sending to the answer, by verb; the " +
      "writes (PATCH, PUT, POST, DELETE) are off the CNI answer's path",
    ["verb"],
    LATENCY_BUCKETS,
  );
  readonly #families: MetricFamily[];

  /** Creates the metrics, reading state from `sources` at each scrape. */
  constructor(sources: MetricsSources = {}) {
    const perWatch = (field: "relists" | "watches") => (): [Labels, number][] =>
      Object.entries(sources.watches?.() ?? {}).map(([resource, s]) => [{ resource }, s[field]]);
    this.#families = [
      this.#requests,
      this.#abandoned,
      this.#duration,
      this.#phases,
      this.#api,
      new Gauge(
        "ferry_registry_pods",
        "Pods of this node in the registry (from the pod watch)",
        () => [[{}, sources.pods?.() ?? 0]],
      ),
      new Gauge(
        "ferry_watch_relists",
        "Lists made by each watch so far (first list and re-lists)",
        perWatch("relists"),
      ),
      new Gauge(
        "ferry_watch_starts",
        "Watch requests opened by each watch so far (restarts included)",
        perWatch("watches"),
      ),
      new Gauge(
        "ferry_api_requests",
        "Kubernetes API requests answered so far, by verb and code (ok, an HTTP status, " +
          "or unreachable)",
        () =>
          Object.entries(sources.apiRequests?.() ?? {}).map(([key, n]) => {
            const [verb, code] = key.split(" ");
            return [{ verb, code }, n];
          }),
      ),
      new Gauge(
        "ferry_addresses",
        "Addresses of the default network per range or block, in use and free",
        () =>
          (sources.addresses?.() ?? []).flatMap((r): [Labels, number][] => [
            [{ range: r.range, state: "used" }, r.used],
            [{ range: r.range, state: "free" }, r.free],
          ]),
      ),
      new Gauge(
        "ferry_attachments",
        "Interfaces plugged on this node, by network",
        () => Object.entries(sources.attachments?.() ?? {}).map(([network, n]) => [{ network }, n]),
      ),
      new Gauge(
        "ferry_gc_outcomes",
        "The IP reconcile loop so far: attachments released, releases given up, sweeps run",
        () => {
          const g = sources.gc?.();
          return [
            [{ outcome: "released" }, g?.released ?? 0],
            [{ outcome: "failed" }, g?.failed ?? 0],
            [{ outcome: "sweeps" }, g?.sweeps ?? 0],
          ];
        },
      ),
      new Gauge(
        "ferry_ipam_conflicts",
        "Addresses this node's last ipam check found recorded for two interfaces, allocated " +
          "outside its ranges, or recorded but not allocated (0 on a healthy node)",
        () => [[{}, sources.ipamCheck?.().conflicts ?? 0]],
      ),
      new Gauge(
        "ferry_ipam_leaked_addresses",
        "Addresses this node's last ipam check found allocated to no recorded interface",
        () => [[{}, sources.ipamCheck?.().leaked ?? 0]],
      ),
      new Gauge(
        "ferry_nad_ipam_conflicts",
        "NAD networks served natively, per address space this node holds blocks of: addresses " +
          "its last ipam check found on two attachments, outside their block, or recorded but " +
          "not allocated",
        () =>
          (sources.ipamCheck?.().networks ?? []).map((n) => [{ network: n.network }, n.conflicts]),
      ),
      new Gauge(
        "ferry_nad_ipam_leaked_addresses",
        "NAD networks served natively, per address space: addresses this node's last ipam check " +
          "found allocated to no recorded attachment",
        () => (sources.ipamCheck?.().networks ?? []).map((n) => [{ network: n.network }, n.leaked]),
      ),
      new Gauge(
        "ferry_cluster_unroutable_ranges",
        "Other nodes' pod ranges this node has no working route to (no address of their " +
          "family, no VXLAN endpoint yet, or a route or overlay entry the kernel refused)",
        () => [[{}, sources.unroutableRanges?.() ?? 0]],
      ),
      new Gauge(
        "ferry_policy_allowed_packets",
        "NetworkPolicy: packets each allowing rule let through since its chain was written (a " +
          "gauge: a changed chain starts again), by policy (namespace/name) and rule " +
          "(ingress[i], egress[i])",
        () =>
          summed((sources.policyRules?.() ?? []).flatMap((r): [Labels, number][] => {
            const m = /^(\S+) ((?:ingress|egress)\[\d+\])$/.exec(r.comment);
            return m ? [[{ policy: m[1], rule: m[2] }, r.packets]] : [];
          })),
      ),
      new Gauge(
        "ferry_policy_denied_packets",
        "NetworkPolicy: packets dropped for a pod of this node because no rule allowed them, " +
          "since the pod's chain was written, by pod (namespace/name) and direction",
        () =>
          summed((sources.policyRules?.() ?? []).flatMap((r): [Labels, number][] => {
            const m = /^(\S+): no (ingress|egress) rule allows it$/.exec(r.comment);
            return m ? [[{ pod: m[1], direction: m[2] }, r.packets]] : [];
          })),
      ),
      new Gauge(
        "ferry_policy_problems",
        "NetworkPolicy and MultiNetworkPolicy, by kind and problem: invalid_policies (known now, " +
          "enforced as isolating only), failed_passes and dropped_addresses (network-status " +
          "entries not taken as peers) so far",
        () =>
          (sources.policyProblems?.() ?? []).map((p) => [
            { kind: p.kind, problem: p.problem },
            p.count,
          ]),
      ),
      new Gauge(
        "ferry_policy_refused",
        "NetworkPolicy: 1 for each policy the size limits (policy.limits) refuse on this node, " +
          "by policy (namespace/name): the pods it selects are isolated without what it allows",
        () => (sources.policyRefused?.() ?? []).map((policy): [Labels, number] => [{ policy }, 1]),
      ),
      new Gauge(
        "ferry_spoofed_packets",
        "Port security: frames a pod of this node sent as someone else, dropped on the host " +
          "side, by pod and kind (mac, ethertype, arp, ipv4, ipv6, nd, ra, redirect, dhcp); " +
          "read every 10 s, starting again when the guard table is rebuilt",
        () =>
          summed((sources.spoofed?.() ?? []).map((d): [Labels, number] => [
            { namespace: d.namespace, pod: d.pod, kind: d.kind },
            d.packets,
          ])),
      ),
    ];
  }

  /** Counts one CNI request and its duration (`code` 0 for success). */
  request(command: string, code: number, ms: number): void {
    this.#requests.inc({ command, code: String(code) });
    this.#duration.observe({ command }, ms / 1000);
  }

  /** Counts one CNI request abandoned by its requester. */
  abandoned(command: string): void {
    this.#abandoned.inc({ command });
  }

  /** Observes one answered API request (ms). */
  apiRequest(verb: string, ms: number): void {
    this.#api.observe({ verb }, ms / 1000);
  }

  /** Observes one ADD phase (ms). */
  phase(phase: AddPhase, ms: number): void {
    this.#phases.observe({ phase }, ms / 1000);
  }

  /**
   * The text exposition format; with `detail` false, the {@link TENANT_LABELS} are left out and
   * the series they told apart summed.
   */
  text(detail = true): string {
    return exposition(this.#families, detail ? undefined : TENANT_LABELS);
  }

  /** Its content type. */
  get contentType(): string {
    return PROMETHEUS_CONTENT_TYPE;
  }
}
