import { assertEquals, assertMatch, assertRejects, assertThrows } from "deno-std/assert/mod.js";
import { parseAll } from "deno-std/yaml/parse.js";
import { ConfigError, DEFAULT_CONFIG, loadConfig, resolveConfig } from "../../daemon/config.ts";
import { parseDaemonArgs } from "../../daemon/main.ts";
import { withFerry } from "../../daemon/dev/harness.ts";

Deno.test("no file gives the defaults; flags override the file", () => {
  assertEquals(resolveConfig(undefined), DEFAULT_CONFIG);
  const c = resolveConfig({ socket: "/a.sock", network: { subnet: "10.1.0.0/24" } }, {
    socket: "/b.sock",
  });
  assertEquals([c.socket, c.network.subnet, c.network.mtu], ["/b.sock", "10.1.0.0/24", 1500]);
});

Deno.test("invalid fields and unknown keys are named in the error", () => {
  assertMatch(
    assertThrows(() => resolveConfig({ socket: "relative" }), ConfigError).message,
    /\/socket/,
  );
  assertMatch(
    assertThrows(() => resolveConfig({ sockett: "/x" }), ConfigError).message,
    /additional properties/,
  );
  assertMatch(
    assertThrows(() => resolveConfig({ network: { mtu: 10 } }), ConfigError).message,
    /\/network\/mtu/,
  );
  assertThrows(() => resolveConfig([]), ConfigError);
});

Deno.test("an unreadable or non-JSON file is a clear error", async () => {
  await assertRejects(() => loadConfig("/nonexistent/ferry.json"), ConfigError, "cannot read");
  const f = await Deno.makeTempFile();
  await Deno.writeTextFile(f, "{oops");
  await assertRejects(() => loadConfig(f), ConfigError, "not valid JSON");
  await Deno.remove(f);
});

Deno.test("the command line takes --config and the override flags, and refuses others", () => {
  assertEquals(parseDaemonArgs(["--config", "/c.json", "--socket", "/s", "--node-name", "n1"]), {
    configFile: "/c.json",
    overrides: {
      socket: "/s",
      nodeName: "n1",
      kubeconfig: undefined,
      stateDir: undefined,
      standalone: undefined,
    },
  });
  assertEquals(parseDaemonArgs(["--standalone"]).overrides.standalone, true);
  assertThrows(() => parseDaemonArgs(["--sockte", "/s"]), ConfigError);
});

Deno.test("the DaemonSet's ConfigMap holds a configuration the daemon accepts", async () => {
  const docs = parseAll(
    await Deno.readTextFile(new URL("../../deploy/daemonset.yaml", import.meta.url)),
  ) as { kind: string; data?: Record<string, string> }[];
  const map = docs.find((d) => d.kind === "ConfigMap")!;
  const config = resolveConfig(JSON.parse(map.data!["config.json"]));
  assertEquals([config.network.bridge, config.network.plumbing], ["ferry0", "netlink"]);
});

Deno.test("a dual-stack network needs an IPv4 subnet and an IPv6 subnet6, and says so", async () => {
  for (
    const network of [{ subnet6: "10.9.0.0/24" }, { subnet: "fd00::/64", subnet6: "fd01::/64" }]
  ) {
    await assertRejects(
      () => withFerry({ config: { network } }, () => Promise.resolve()),
      ConfigError,
      "subnet must be IPv4 and subnet6 IPv6",
    );
  }
  await assertRejects(
    () => withFerry({ config: { network: { subnet6: "fd00::/200" } } }, () => Promise.resolve()),
    ConfigError,
    "invalid network",
  );
});
