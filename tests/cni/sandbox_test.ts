import { assertEquals } from "deno-std/assert/mod.js";
import { install, installUnder, wrapperCommand } from "../../cni/install.ts";
import { compileArgs } from "../../cni/build.ts";
import { SHIM_ENTRYPOINT, shimPermissionFlags } from "../../cni/sandbox.ts";

const PROBE = new URL("./sandbox_probe.ts", import.meta.url).pathname;

Deno.test("under the shim's flags nothing but its socket and the CNI variables is reachable", async () => {
  const dir = await Deno.makeTempDir();
  const socketPath = `${dir}/ferry.sock`;
  const otherFile = `${dir}/secret.txt`;
  await Deno.writeTextFile(otherFile, "secret");
  const unix = Deno.listen({ transport: "unix", path: socketPath });
  const tcp = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepting = (async () => {
    for await (const c of unix) c.close();
  })();
  const tcpAccepting = (async () => {
    for await (const c of tcp) c.close();
  })();
  try {
    const cmd = wrapperCommand({
      socket: socketPath,
      denoPath: Deno.execPath(),
      shimBundle: `${dir}/ferry-shim.js`,
    });
    const entry = cmd.indexOf(`${dir}/ferry-shim.js`);
    const args = [...cmd.slice(1, entry), PROBE, socketPath, String(tcp.addr.port), otherFile];
    const out = await new Deno.Command(cmd[0], {
      args,
      env: { CNI_COMMAND: "ADD", FERRY_SECRET: "x", DENO_DIR: `${dir}/deno` },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assertEquals(out.success, true, new TextDecoder().decode(out.stderr));
    assertEquals(JSON.parse(text), {
      readOtherFile: "NotCapable",
      writeOtherFile: "NotCapable",
      tcpConnect: "NotCapable",
      fetchTcp: "NotCapable",
      otherEnv: "NotCapable",
      allEnv: "NotCapable",
      subprocess: "NotCapable",
      cniEnv: "allowed",
      socket: "allowed",
    });
  } finally {
    unix.close();
    tcp.close();
    await accepting.catch(() => {});
    await tcpAccepting.catch(() => {});
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the installed wrapper runs exactly the sandboxed command, with a fixed cache and no config", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const o = installUnder(dir, `${dir}/f.sock`);
    const { shim, conflist } = await install(o);
    const script = await Deno.readTextFile(shim);
    const expected = wrapperCommand(o).map((a) => `'${a}'`).join(" ");
    const exec = script.split("\n").find((l) => l.startsWith("exec "))!;
    assertEquals(exec.startsWith("exec /usr/bin/env -i "), true, exec);
    assertEquals(exec.endsWith(` "$@" ${expected}`), true, exec);
    assertEquals(exec.includes(`'DENO_DIR=${dir}/deno'`), true);
    for (const flag of ["--no-config", "--cached-only", "--no-remote", "--no-code-cache"]) {
      assertEquals(script.includes(`'${flag}'`), true, flag);
    }
    // The shim it runs is one bundled file with no imports (one module to load per start).
    const bundle = await Deno.readTextFile(o.shimBundle);
    assertEquals(/^\s*import\s/m.test(bundle), false);
    assertEquals(exec.includes(`'${o.shimBundle}'`), true);
    assertEquals((await Deno.stat(shim)).mode! & 0o111, 0o111);
    assertEquals(JSON.parse(await Deno.readTextFile(conflist)).plugins, [
      { type: "ferry" },
      { type: "portmap", capabilities: { portMappings: true } },
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The files of V8's code cache database in a Deno directory. */
async function codeCacheFiles(denoDir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(denoDir)) {
    if (e.name.startsWith("v8_code_cache")) names.push(e.name);
  }
  return names;
}

Deno.test("the installed shim neither reads nor writes V8's code cache in its Deno directory", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const o = installUnder(dir, `${dir}/f.sock`);
    const { shim } = await install(o);
    // The install's own Deno runs may have made the database: start from none.
    for (const name of await codeCacheFiles(o.denoDir)) await Deno.remove(`${o.denoDir}/${name}`);
    // VERSION answers; ADD without its variables is refused (code 4): both start and run code.
    for (const [command, exitCode] of [["VERSION", 0], ["ADD", 1]] as const) {
      const out = await new Deno.Command(shim, {
        clearEnv: true,
        env: { CNI_COMMAND: command, CNI_PATH: "/x" },
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      assertEquals(out.code, exitCode, new TextDecoder().decode(out.stderr));
    }
    assertEquals(await codeCacheFiles(o.denoDir), []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the image's deno compile step uses the same permission flags as the wrapper", () => {
  const args = compileArgs("/run/ferry/ferry.sock", "/out/ferry");
  const perms = shimPermissionFlags("/run/ferry/ferry.sock");
  assertEquals(args.filter((a) => a.startsWith("--allow") || a === "--no-prompt"), perms);
  const wrapper = wrapperCommand({
    socket: "/run/ferry/ferry.sock",
    denoPath: "deno",
    shimBundle: "/opt/cni/bin/ferry-shim.js",
  });
  assertEquals(wrapper.filter((a) => a.startsWith("--allow") || a === "--no-prompt"), perms);
  assertEquals(args.slice(-3), [SHIM_ENTRYPOINT.pathname, "--socket", "/run/ferry/ferry.sock"]);
});
