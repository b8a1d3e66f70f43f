/**
 * The Prometheus text exposition format (version 0.0.4), for the daemon's `/metrics`: counters
 * and histograms with labels, counted where things happen, and gauges read from their sources at
 * each scrape. Ferry's own rather than `prom-client`, whose Node compatibility layer alone cost
 * the daemon about 13 MB of resident memory (`deno task bench`) for the few metric kinds used here.
 *
 * @module
 */

/** Label names to values. */
export type Labels = Record<string, string>;

/** The content type of the text format. */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const escapeLabel = (v: string) =>
  v.replaceAll("\\", "\\\\").replaceAll("\n", "\\n").replaceAll('"', '\\"');
const escapeHelp = (v: string) => v.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");

/** A sample value as the format writes it (`+Inf`, `-Inf`, `NaN`, or the number). */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

/** `{a="x",b="y"}` in the order given, or nothing for no labels. */
export function formatLabels(labels: [string, string][]): string {
  return labels.length === 0
    ? ""
    : `{${labels.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",")}}`;
}

/** One metric family: its name, and its lines at this moment. */
export interface MetricFamily {
  /** The family name. */
  readonly name: string;
  /**
   * `# HELP`, `# TYPE` and the samples; with `without`, samples that carry those labels are
   * summed over them (the labels left out).
   */
  lines(without?: ReadonlySet<string>): string[];
}

function header(name: string, help: string, type: string): string[] {
  return [`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`];
}

/** Series keyed by their label values in the family's label order. */
class SeriesMap<T> {
  readonly #series = new Map<string, { labels: [string, string][]; value: T }>();
  constructor(readonly labelNames: string[], readonly fresh: () => T) {}

  get(labels: Labels): T {
    const values = this.labelNames.map((n) => labels[n] ?? "");
    const key = JSON.stringify(values);
    let s = this.#series.get(key);
    if (!s) {
      s = { labels: this.labelNames.map((n, i) => [n, values[i]]), value: this.fresh() };
      this.#series.set(key, s);
    }
    return s.value;
  }

  entries(): { labels: [string, string][]; value: T }[] {
    return [...this.#series.values()];
  }
}

/**
 * A counter family.
 *
 * @example
 * ```ts
 * const c = new Counter("ferry_cni_requests_total", "CNI requests", ["command"]);
 * c.inc({ command: "ADD" });
 * ```
 */
export class Counter implements MetricFamily {
  readonly #series: SeriesMap<{ n: number }>;

  /** A family called `name` with these label names. */
  constructor(readonly name: string, readonly help: string, labelNames: string[] = []) {
    this.#series = new SeriesMap(labelNames, () => ({ n: 0 }));
  }

  /** Adds `by` (default 1) to the series of `labels`. */
  inc(labels: Labels = {}, by = 1): void {
    this.#series.get(labels).n += by;
  }

  /** The family's lines. */
  lines(): string[] {
    return [
      ...header(this.name, this.help, "counter"),
      ...this.#series.entries().map((s) =>
        `${this.name}${formatLabels(s.labels)} ${formatValue(s.value.n)}`
      ),
    ];
  }
}

/**
 * A histogram family with fixed upper bounds.
 *
 * @example
 * ```ts
 * const h = new Histogram("ferry_x_seconds", "x", ["phase"], [0.01, 0.1, 1]);
 * h.observe({ phase: "plug" }, 0.004);
 * ```
 */
export class Histogram implements MetricFamily {
  readonly #series: SeriesMap<{ counts: number[]; sum: number; count: number }>;

  /** A family called `name`; `buckets` are the upper bounds, ascending (`+Inf` is added). */
  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: string[],
    readonly buckets: number[],
  ) {
    this.#series = new SeriesMap(
      labelNames,
      () => ({ counts: buckets.map(() => 0), sum: 0, count: 0 }),
    );
  }

  /** Records one observation. */
  observe(labels: Labels, value: number): void {
    const s = this.#series.get(labels);
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]) s.counts[i]++;
    s.sum += value;
    s.count++;
  }

  /** The family's lines: cumulative buckets (`le` last among the labels), sum and count. */
  lines(): string[] {
    const out = header(this.name, this.help, "histogram");
    for (const { labels, value } of this.#series.entries()) {
      this.buckets.forEach((b, i) =>
        out.push(
          `${this.name}_bucket${formatLabels([...labels, ["le", formatValue(b)]])} ${
            value.counts[i]
          }`,
        )
      );
      out.push(`${this.name}_bucket${formatLabels([...labels, ["le", "+Inf"]])} ${value.count}`);
      out.push(`${this.name}_sum${formatLabels(labels)} ${formatValue(value.sum)}`);
      out.push(`${this.name}_count${formatLabels(labels)} ${value.count}`);
    }
    return out;
  }
}

/**
 * A gauge family whose samples are read at each scrape.
 *
 * @example
 * ```ts
 * new Gauge("ferry_registry_pods", "pods", () => [[{}, registry.size]]);
 * ```
 */
export class Gauge implements MetricFamily {
  /** A family called `name`; `collect` returns its samples (labels and value) now. */
  constructor(
    readonly name: string,
    readonly help: string,
    readonly collect: () => [Labels, number][],
  ) {}

  /** The family's lines; labels in `without` left out, the samples they told apart summed. */
  lines(without?: ReadonlySet<string>): string[] {
    const samples = new Map<string, [[string, string][], number]>();
    for (const [labels, v] of this.collect()) {
      const kept = Object.entries(labels).filter(([k]) => !without?.has(k));
      const key = JSON.stringify(kept);
      const known = samples.get(key);
      if (known) known[1] += v;
      else samples.set(key, [kept, v]);
    }
    return [
      ...header(this.name, this.help, "gauge"),
      ...[...samples.values()].map(([labels, v]) =>
        `${this.name}${formatLabels(labels)} ${formatValue(v)}`
      ),
    ];
  }
}

/**
 * The exposition of `families`, in order, ending with a newline; labels in `without` left out of
 * the gauges that carry them (their samples summed).
 */
export function exposition(families: MetricFamily[], without?: ReadonlySet<string>): string {
  return families.flatMap((f) => f.lines(without)).join("\n") + "\n";
}
