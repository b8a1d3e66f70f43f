/**
 * Feeding a child process its standard input. A child may exit without reading all of it: a
 * delegated plugin with nothing to do or failing early, `nsenter` refusing a namespace that is
 * gone, `nft` rejecting a ruleset. The pipe is then broken, and the child's exit status and what
 * it printed tell what happened, not the write: callers decide on those, as they do for every
 * other failure of the child.
 *
 * @module
 */

/**
 * Writes `input` to the child's stdin and closes it; a pipe the child closed is not an error.
 *
 * @example
 * ```ts
 * const child = new Deno.Command("nft", { args: ["-f", "-"], stdin: "piped" }).spawn();
 * await feedStdin(child, ruleset);
 * const out = await child.output();
 * ```
 */
export async function feedStdin(child: Deno.ChildProcess, input: string): Promise<void> {
  const writer = child.stdin.getWriter();
  try {
    await writer.write(new TextEncoder().encode(input));
    await writer.close();
  } catch (e) {
    if (!(e instanceof Deno.errors.BrokenPipe)) throw e;
  }
}
