/**
 * `deno task dev`: a daemon for local work, with its socket, state and installed shim under
 * `.dev/` in the repository, reloaded on code changes (`--watch`). Prints how to drive it.
 *
 * @module
 */
import { install } from "../../cni/install.ts";
import { resolveConfig } from "../config.ts";
import { setupLogging } from "../log.ts";
import { startDaemon } from "../main.ts";

if (import.meta.main) {
  const repo = new URL("../../", import.meta.url).pathname;
  const dev = `${repo}.dev`;
  const config = resolveConfig({
    logLevel: "debug",
    network: { subnet: "10.244.251.0/24", mtu: 1500 },
  }, {
    socket: `${dev}/run/ferry.sock`,
    stateDir: `${dev}/state`,
    nodeName: "dev-node",
  });
  await setupLogging(config.logLevel);
  const { shim, conflist } = await install({
    binDir: `${dev}/bin`,
    confDir: `${dev}/conf`,
    socket: config.socket,
    denoDir: `${dev}/deno`,
    networkName: "ferry",
    cniVersion: "1.0.0",
    denoPath: Deno.execPath(),
    lockFile: `${repo}deno.lock`,
  });
  const daemon = await startDaemon(config);
  console.error(
    `dev daemon on ${config.socket}\nshim: ${shim}\nconflist: ${conflist}\n` +
      `try: sudo ip netns add demo && echo '{"cniVersion":"1.0.0","name":"ferry","type":"ferry"}' | ` +
      `CNI_COMMAND=ADD CNI_CONTAINERID=demo1 CNI_NETNS=/var/run/netns/demo CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni ${shim}`,
  );
  const stop = async () => {
    await daemon.stop();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  await daemon.finished;
}
