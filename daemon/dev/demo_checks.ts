/**
 * What a demo checks, each check printed with its result as it is made, and the verdict: which
 * checks did not hold, by name. A demo that fails says why, to its user and to its test, instead
 * of folding its checks into one boolean.
 *
 * @module
 */

/**
 * The checks of one demo run.
 *
 * @example
 * ```ts
 * const checks = new DemoChecks();
 * checks.check("web-0 reaches the host", await pingOnce(gateway, ns));
 * if (!checks.ok) console.log(`failed: ${checks.failed.join("; ")}`);
 * ```
 */
export class DemoChecks {
  readonly #failed: string[] = [];
  readonly #print: (line: string) => void;
  #made = 0;

  /** Checks printed with `print` (the console by default). */
  constructor(print: (line: string) => void = (line) => console.log(line)) {
    this.#print = print;
  }

  /** Records (and prints) that `what` held or not, with what was seen when it did not. */
  check(what: string, held: boolean, seen?: string): boolean {
    this.#made++;
    this.#print(`  ${held ? "ok  " : "FAIL"} ${what}${!held && seen ? ` (${seen})` : ""}`);
    if (!held) this.#failed.push(seen ? `${what} (${seen})` : what);
    return held;
  }

  /** The checks that did not hold, each named with what was seen. */
  get failed(): string[] {
    return [...this.#failed];
  }

  /** How many checks were made. */
  get made(): number {
    return this.#made;
  }

  /** True when every check held. */
  get ok(): boolean {
    return this.#failed.length === 0;
  }
}

/**
 * Polls `read` until `accept` holds for what it returns or `timeoutMs` passes; resolves to the
 * last value read either way (an asynchronous write, like a pod's annotation written after the
 * ADD's answer, is waited for before it is judged).
 *
 * @example
 * ```ts
 * const pod = await eventually(() => kube.get<Pod>(PODS, "default", "web-0"), (p) => annotated(p));
 * ```
 */
export async function eventually<T>(
  read: () => Promise<T>,
  accept: (value: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    const value = await read();
    if (accept(value) || Date.now() >= deadline) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}
