/**
 * Latency distributions as an SVG image: one panel per measurement, one cumulative curve per
 * series (x: milliseconds on a log scale, y: share of operations done within that time), so
 * medians and tails of Ferry, the reference plugins and the floors read side by side. Pure: data
 * in, SVG text out.
 *
 * @module
 */

/** One curve. */
export interface ChartSeries {
  /** Legend text. */
  name: string;
  /** Latencies in ms. */
  samples: number[];
}

/** One panel. */
export interface ChartPanel {
  /** Title above the panel. */
  title: string;
  /** The curves. */
  series: ChartSeries[];
}

const WIDTH = 760;
const PANEL_HEIGHT = 250;
const MARGIN = { left: 56, right: 190, top: 34, bottom: 36 };
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

const escapeXml = (s: string) =>
  s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll(
    '"',
    "&quot;",
  );

/**
 * Ticks at 1, 2, 5 × powers of ten between `lo` and `hi`, or finer steps (1, 1.5, 2, 3, 4, 5, 6,
 * 8) when that gives fewer than four.
 */
export function logTicks(lo: number, hi: number): number[] {
  const at = (steps: number[]) => {
    const ticks: number[] = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of steps) {
        const t = Number((m * 10 ** e).toPrecision(3));
        if (t >= lo && t <= hi) ticks.push(t);
      }
    }
    return ticks;
  };
  const coarse = at([1, 2, 5]);
  return coarse.length >= 4 ? coarse : at([1, 1.5, 2, 3, 4, 5, 6, 8]);
}

/** The points of a cumulative curve: (latency, fraction of samples ≤ it), sorted. */
export function cdfPoints(samples: number[]): [number, number][] {
  const s = [...samples].sort((a, b) => a - b);
  return s.map((v, i) => [v, (i + 1) / s.length]);
}

function panelSvg(panel: ChartPanel, top: number): string {
  const all = panel.series.flatMap((s) => s.samples).filter((v) => v > 0);
  if (all.length === 0) return "";
  const lo = Math.min(...all) * 0.9, hi = Math.max(...all) * 1.1;
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = PANEL_HEIGHT - MARGIN.top - MARGIN.bottom;
  const x = (v: number) =>
    MARGIN.left + (Math.log10(Math.max(v, lo)) - Math.log10(lo)) /
      (Math.log10(hi) - Math.log10(lo)) * plotW;
  const y = (f: number) => top + MARGIN.top + (1 - f) * plotH;
  const parts: string[] = [
    `<text x="${MARGIN.left}" y="${top + 20}" font-size="14" font-weight="bold">${
      escapeXml(panel.title)
    }</text>`,
    `<rect x="${MARGIN.left}" y="${
      y(1)
    }" width="${plotW}" height="${plotH}" fill="none" stroke="#999"/>`,
  ];
  for (const t of logTicks(lo, hi)) {
    parts.push(
      `<line x1="${x(t).toFixed(1)}" y1="${y(0)}" x2="${x(t).toFixed(1)}" y2="${
        y(1)
      }" stroke="#eee"/>`,
      `<text x="${x(t).toFixed(1)}" y="${
        y(0) + 14
      }" font-size="10" text-anchor="middle">${t}</text>`,
    );
  }
  for (const f of [0, 0.5, 0.9, 1]) {
    parts.push(
      `<line x1="${MARGIN.left}" y1="${y(f).toFixed(1)}" x2="${MARGIN.left + plotW}" y2="${
        y(f).toFixed(1)
      }" stroke="${f === 0 || f === 1 ? "#999" : "#ddd"}"/>`,
      `<text x="${MARGIN.left - 6}" y="${(y(f) + 3).toFixed(1)}" font-size="10" text-anchor="end">${
        f === 0.9 ? "p90" : f === 0.5 ? "p50" : `${f * 100}%`
      }</text>`,
    );
  }
  parts.push(
    `<text x="${MARGIN.left + plotW / 2}" y="${
      y(0) + 30
    }" font-size="11" text-anchor="middle">ms (log scale)</text>`,
  );
  panel.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const points = cdfPoints(s.samples);
    if (points.length === 0) return;
    const path = points.map(([v, f], j) =>
      `${j === 0 ? "M" : "L"}${x(v).toFixed(1)},${y(j === 0 ? 0 : points[j - 1][1]).toFixed(1)}` +
      ` L${x(v).toFixed(1)},${y(f).toFixed(1)}`
    ).join(" ");
    parts.push(`<path d="${path}" fill="none" stroke="${color}" stroke-width="1.8"/>`);
    const ly = top + MARGIN.top + 14 + i * 18;
    parts.push(
      `<line x1="${WIDTH - MARGIN.right + 14}" y1="${ly - 4}" x2="${
        WIDTH - MARGIN.right + 34
      }" y2="${ly - 4}" stroke="${color}" stroke-width="3"/>`,
      `<text x="${WIDTH - MARGIN.right + 40}" y="${ly}" font-size="11">${escapeXml(s.name)}</text>`,
    );
  });
  return parts.join("\n");
}

/**
 * The SVG document for `panels`, with `caption` (machine and date) at the bottom.
 *
 * @example
 * ```ts
 * cdfChart([{ title: "ADD", series: [{ name: "ferry", samples: [20, 21, 25] }] }], "2 CPUs");
 * ```
 */
export function cdfChart(panels: ChartPanel[], caption: string): string {
  const height = panels.length * PANEL_HEIGHT + 30;
  const body = panels.map((p, i) => panelSvg(p, i * PANEL_HEIGHT)).join("\n");
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" ` +
    `viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif">`,
    `<rect width="${WIDTH}" height="${height}" fill="white"/>`,
    body,
    `<text x="${MARGIN.left}" y="${height - 10}" font-size="10" fill="#555">${
      escapeXml(caption)
    }</text>`,
    "</svg>",
    "",
  ].join("\n");
}
