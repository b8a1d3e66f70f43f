/**
 * Runs an async function over items with at most `limit` in flight, results in the items' order:
 * how the CLI asks every node without starting a kubectl per node at once on a large cluster.
 *
 * @module
 */

/** How many nodes the CLI asks at once. */
export const NODE_CONCURRENCY = 16;

/**
 * `items.map(fn)` with at most `limit` calls in flight.
 *
 * @example
 * ```ts
 * const reports = await mapLimit(pods, 16, (pod) => execNodeReport(exec, pod, 20_000));
 * ```
 */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
