// What the tests that attack from inside a pod share: hand-made frames sent on a packet socket
// (CAP_NET_RAW, which every container has) with _spoof.py, and the long-running modes of
// _spoof.py and _probe.py (listeners, sniffers) whose lines a test reads as they come.
import { run } from "../../daemon/dev/netns.ts";

/** The frame maker: `python3 _spoof.py IFNAME KIND ARGS…`, `listen PORT`, `sniff IFNAME PORT`. */
export const SPOOF = new URL("./_spoof.py", import.meta.url).pathname;
/** The probe: sockets of kinds _spoof.py does not make (see its header). */
export const PROBE = new URL("./_probe.py", import.meta.url).pathname;

/** Sends the frames of `kind` from interface `ifname` of the namespace named `ns`. */
export async function spoofIn(
  ns: string,
  ifname: string,
  kind: string,
  ...args: string[]
): Promise<void> {
  await run("ip", "netns", "exec", ns, "python3", SPOOF, ifname, kind, ...args);
}

/** A long-running mode's process and the lines it printed so far. */
export interface Watcher {
  /** Every line after its "listening", in order. */
  lines: string[];
  /** Kills it (again: nothing). */
  stop(): void;
}

/**
 * Starts `python3 SCRIPT ARGS…` in the namespace named `ns` and resolves once it printed
 * "listening" (within 10 s, or it is killed and the start fails naming the mode).
 */
export async function watchIn(ns: string, script: string, ...args: string[]): Promise<Watcher> {
  const child = new Deno.Command("ip", {
    args: ["netns", "exec", ns, "python3", script, ...args],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const lines: string[] = [];
  const ready = Promise.withResolvers<void>();
  void (async () => {
    let rest = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      rest += chunk;
      const parts = rest.split("\n");
      rest = parts.pop()!;
      for (const l of parts) l === "listening" ? ready.resolve() : lines.push(l);
    }
  })().catch(() => {});
  const timer = setTimeout(
    () => ready.reject(new Error(`${args.join(" ")} in ${ns}: never ready`)),
    10_000,
  );
  try {
    await ready.promise;
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  } finally {
    clearTimeout(timer);
  }
  return {
    lines,
    stop: () => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    },
  };
}
