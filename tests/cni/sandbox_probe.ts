// Run by sandbox_test.ts under the shim's exact permission flags: tries everything the shim must
// not be able to do, and the two things it must, and prints what happened as JSON.
const [socketPath, tcpPort, otherFile] = Deno.args;
async function attempt(fn: () => unknown): Promise<string> {
  try {
    await fn();
    return "allowed";
  } catch (e) {
    return e instanceof Error ? e.name : String(e);
  }
}
const report = {
  readOtherFile: await attempt(() => Deno.readTextFileSync(otherFile)),
  writeOtherFile: await attempt(() => Deno.writeTextFileSync(`${otherFile}.w`, "x")),
  tcpConnect: await attempt(async () =>
    (await Deno.connect({ hostname: "127.0.0.1", port: Number(tcpPort) })).close()
  ),
  fetchTcp: await attempt(() => fetch(`http://127.0.0.1:${tcpPort}/`)),
  otherEnv: await attempt(() => Deno.env.get("FERRY_SECRET")),
  allEnv: await attempt(() => Deno.env.toObject()),
  subprocess: await attempt(() => new Deno.Command("/bin/true").outputSync()),
  cniEnv: await attempt(() => Deno.env.get("CNI_COMMAND")),
  socket: await attempt(async () =>
    (await Deno.connect({ transport: "unix", path: socketPath })).close()
  ),
};
console.log(JSON.stringify(report));
