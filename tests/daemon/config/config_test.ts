import { assertEquals, assertMatch, assertRejects, assertThrows } from "deno-std/assert/mod.js";
import { parseAll } from "deno-std/yaml/parse.js";
import {
  ConfigError,
  DEFAULT_CONFIG,
  loadConfig,
  resolveConfig,
} from "../../../daemon/config/config.ts";
import { parseDaemonArgs } from "../../../daemon/config/args.ts";
import { withFerry } from "../../../daemon/dev/harness.ts";

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
    /: socket must match/,
  );
  assertMatch(
    assertThrows(() => resolveConfig({ sockett: "/x" }), ConfigError).message,
    /has an unknown key "sockett"/,
  );
  assertMatch(
    assertThrows(() => resolveConfig({ network: { mtu: 10 } }), ConfigError).message,
    /: network\.mtu must be >= 576/,
  );
  assertThrows(() => resolveConfig([]), ConfigError);
});

Deno.test("a section given as something other than an object is refused by name, never read as its defaults", () => {
  const cases: [Record<string, unknown>, string][] = [
    [
      { masquerade: false },
      'masquerade must be an object (with keys enabled, nonMasqueradeCIDRs, table), e.g. {"enabled":false}',
    ],
    [{ routing: false }, 'routing must be an object (with keys mode, vxlan), e.g. {"mode":"none"}'],
    [
      { ipam: false },
      'ipam must be an object (with keys mode, pools, blockReleaseSeconds, reuseDelaySeconds), e.g. {"mode":"local"}',
    ],
    // Once, not once per character of the string.
    [
      { routing: "host-gw" },
      'routing must be an object (with keys mode, vxlan), e.g. {"mode":"host-gw"}',
    ],
    [{ routing: { vxlan: 1 } }, "routing.vxlan must be an object (with keys vni, port, device)"],
  ];
  for (const [file, message] of cases) {
    const got = assertThrows(() => resolveConfig(file), ConfigError).message;
    assertEquals(got.startsWith(`invalid configuration: ${message}`), true, got);
    assertEquals(got.split(";").length, 1, got);
  }
});

Deno.test("an enumeration's wrong value lists the allowed ones, once", () => {
  assertEquals(
    assertThrows(() => resolveConfig({ routing: { mode: "hostgw" } }), ConfigError).message,
    'invalid configuration: routing.mode must be one of "none", "host-gw", "vxlan"',
  );
  assertEquals(
    assertThrows(() => resolveConfig({ logLevel: "loud" }), ConfigError).message,
    'invalid configuration: logLevel must be one of "trace", "debug", "info", "warning", "error", "fatal"',
  );
  assertEquals(
    assertThrows(() => resolveConfig({ server: { httpPort: "9667" } }), ConfigError).message,
    "invalid configuration: server.httpPort must be integer",
  );
});

Deno.test("CIDRs and addresses are checked before anything uses them, and a pod range too small says so", () => {
  const message = (file: Record<string, unknown>) =>
    assertThrows(() => resolveConfig(file), ConfigError).message;
  assertEquals(
    message({ masquerade: { nonMasqueradeCIDRs: ["10.0.0.0/8", "nope"] } }),
    'invalid configuration: masquerade.nonMasqueradeCIDRs[1] "nope" is not a CIDR (such as 10.244.0.0/24)',
  );
  assertEquals(
    message({ network: { subnet: "10.1.0.0/32" } }),
    "invalid configuration: network.subnet 10.1.0.0/32 is too small for pods: a /32 has no room " +
      "for a gateway and a pod; use a /30 or larger (such as 10.244.0.0/24)",
  );
  assertMatch(message({ network: { subnet: "10.1.0.0/31" } }), /a \/31 has no room/);
  assertMatch(
    message({ network: { subnet: "10.1.0.0/24", gateway: "x" } }),
    /network\.gateway "x" is not an IP/,
  );
  assertMatch(
    message({ network: { subnet6: "fd00::/128" } }),
    /network\.subnet6 fd00::\/128 is too small/,
  );
  assertEquals(resolveConfig({ network: { subnet: "10.1.0.0/30" } }).network.subnet, "10.1.0.0/30");
});

Deno.test("an unreadable or non-JSON file is a clear error", async () => {
  await assertRejects(() => loadConfig("/nonexistent/ferry.json"), ConfigError, "cannot read");
  const f = await Deno.makeTempFile();
  await Deno.writeTextFile(f, "{oops");
  await assertRejects(() => loadConfig(f), ConfigError, "not valid JSON");
  await Deno.remove(f);
});

Deno.test("the command line takes --config and the override flags, and refuses others", () => {
  assertEquals(
    parseDaemonArgs([
      "--config",
      "/c.json",
      "--socket",
      "/s",
      "--node-name",
      "n1",
      "--sysctl-dir",
      "/host/proc/sys",
      "--staged-conflist",
      "/var/lib/ferry/cni/10-ferry.conflist",
    ]),
    {
      configFile: "/c.json",
      overrides: {
        socket: "/s",
        nodeName: "n1",
        kubeconfig: undefined,
        stateDir: undefined,
        sysctlDir: "/host/proc/sys",
        stagedConflist: "/var/lib/ferry/cni/10-ferry.conflist",
        standalone: undefined,
      },
    },
  );
  assertEquals(parseDaemonArgs(["--standalone"]).overrides.standalone, true);
  assertThrows(() => parseDaemonArgs(["--sockte", "/s"]), ConfigError);
});

Deno.test("the DaemonSet's ConfigMap holds a configuration the daemon accepts", async () => {
  const docs = parseAll(
    await Deno.readTextFile(new URL("../../../deploy/base/daemonset.yaml", import.meta.url)),
  ) as { kind: string; data?: Record<string, string> }[];
  const map = docs.find((d) => d.kind === "ConfigMap")!;
  const config = resolveConfig(JSON.parse(map.data!["config.json"]));
  assertEquals([config.network.bridge, config.network.plumbing], ["ferry0", "netlink"]);
});

Deno.test("each overlay of deploy/ holds a configuration the daemon accepts, in the mode it names", async () => {
  for (
    const [overlay, routing, ipam] of [["vxlan", "vxlan", "auto"], ["pool", "host-gw", "pool"]]
  ) {
    const map = parseAll(
      await Deno.readTextFile(
        new URL(`../../../deploy/overlays/${overlay}/config.yaml`, import.meta.url),
      ),
    ) as { data?: Record<string, string> }[];
    const config = resolveConfig(JSON.parse(map[0].data!["config.json"]));
    assertEquals([config.routing.mode, config.ipam.mode], [routing, ipam], overlay);
  }
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
    'network.subnet6 "fd00::/200" is not a CIDR',
  );
});

Deno.test("every section given in part keeps the defaults of the keys it leaves out", () => {
  assertEquals(resolveConfig({ policy: { enabled: false } }).policy, {
    ...DEFAULT_CONFIG.policy,
    enabled: false,
  });
  for (const [key, defaults] of Object.entries(DEFAULT_CONFIG)) {
    if (typeof defaults !== "object" || Array.isArray(defaults)) continue;
    assertEquals(
      (resolveConfig({ [key]: {} }) as unknown as Record<string, unknown>)[key],
      defaults,
      key,
    );
  }
});

Deno.test("policy.limits given in part keeps the other limit's default", () => {
  const config = resolveConfig({ policy: { limits: { policyEntries: 50 } } });
  assertEquals(config.policy.limits, { policyEntries: 50, namespaceEntries: 10_000 });
  assertEquals(config.policy.table, "ferry-policy");
});
