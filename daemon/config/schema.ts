/**
 * The schema of the daemon's configuration file, and its type. Only `deno task gen` evaluates the
 * schema (to render `lib/_generated/validateDaemonConfig.js`), and `deno task docs` (to render
 * `docs/configuration.md` from its descriptions: every key's meaning is written here, once); the
 * daemon imports the type alone, so neither TypeBox nor ajv is loaded at run time.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";

/** The schema of the daemon configuration file. */
export const DaemonConfigSchema = Type.Object({
  socket: Type.String({
    pattern: "^/",
    description: "unix socket of the shim↔daemon API (0600, parent directory 0700)",
  }),
  nodeName: Type.String({
    minLength: 1,
    description:
      "this node's name in Kubernetes (default: the host name): the daemon watches `spec.nodeName=<nodeName>`",
  }),
  kubeconfig: Type.Optional(
    Type.String({
      description:
        "API credentials: token, token file, client certificate, CA. Exec plugins are refused, and so is `insecure-skip-tls-verify` unless `allowInsecureTls` is set. Without a kubeconfig the daemon uses its pod's service account (the token re-read as it rotates)",
    }),
  ),
  allowInsecureTls: Type.Boolean({
    description:
      "accept a kubeconfig with `insecure-skip-tls-verify` (Deno then also needs `--unsafely-ignore-certificate-errors=<host>`, as it has no per-client switch)",
  }),
  standalone: Type.Boolean({
    description:
      "no Kubernetes at all: ADD plugs without looking up the pod (plain CNI use, the standalone tests)",
  }),
  podWaitSeconds: Type.Number({
    exclusiveMinimum: 0,
    description:
      "how long ADD waits for its pod to reach the node's pod watch (it may race the watch), and for a NAD it names; then CNI error 11",
  }),
  apiRequestTimeoutSeconds: Type.Number({
    exclusiveMinimum: 0,
    description:
      "an API request (an annotation, a block update, an Event, a Lease, a list) still unanswered after this long fails as an unreachable server, and its caller retries as it would then; a watch is bounded by this until its answer's headers. Without it a server that accepts and never answers held a request for the kernel's TCP timeouts (about 15 minutes)",
  }),
  watch: Type.Object({
    timeoutSeconds: Type.Integer({
      minimum: 1,
      description:
        "`timeoutSeconds` of each watch request (±10% jitter); the server closing a watch is normal",
    }),
    unhealthyAfterSeconds: Type.Number({
      exclusiveMinimum: 0,
      description:
        "`/healthz` and `/readyz` turn 503 when the pod watch cannot be re-established for this long; it keeps trying with exponential backoff and jitter",
    }),
    resyncSeconds: Type.Number({
      minimum: 0,
      description: "period of re-delivering the watch cache to its consumers (0: never)",
    }),
    requestTimeoutSeconds: Type.Number({
      exclusiveMinimum: 0,
      description:
        "a list, or the opening of a watch, that takes longer counts as failed; a watch stream is cut this long after its own timeout (half-open connections)",
    }),
  }, { additionalProperties: false }),
  stateDir: Type.String({
    pattern: "^/",
    description:
      "attachment records (`attachments/`) and address allocations (`ipam/<subnet>/`, or `ipam/blocks/<block>/` in pool mode); the node's truth for DEL, CHECK and GC",
  }),
  stagedConflist: Type.String({
    description:
      "a conflist staged by `install-cni --stage-conflist`, which the daemon puts into `cniConfDir` once it is ready, so that the node reports its network ready only then (the DaemonSet passes `--staged-conflist`); empty: none",
  }),
  cniConfDir: Type.String({
    pattern: "^/",
    description: "the runtime's CNI config directory, where `stagedConflist` goes",
  }),
  sysctlDir: Type.String({
    pattern: "^/",
    description:
      "where the daemon writes sysctls (only `net/` below it). The DaemonSet, unprivileged and so with a read-only `/proc/sys`, mounts the host's `/proc/sys/net` at `/host/proc/sys/net` and passes `--sysctl-dir /host/proc/sys` (the mount shows each namespace its own entries, as `/proc/sys/net` does)",
  }),
  network: Type.Object({
    subnet: Type.String({
      description:
        "`local` IPAM: the node's pod range (IPv4, or IPv6 for a single-stack IPv6 node); pods get their address with this prefix",
    }),
    rangeStart: Type.Optional(Type.String({
      description: "first allocatable address of `subnet` (default: its second host)",
    })),
    rangeEnd: Type.Optional(Type.String({
      description: "last allocatable address of `subnet` (default: its last host)",
    })),
    gateway: Type.Optional(Type.String({
      description:
        "the gateway of `subnet` (default: its first host), held by the bridge; each pod's default route goes through it",
    })),
    subnet6: Type.Optional(Type.String({
      description:
        "the IPv6 range of a dual-stack node in `local` IPAM (e.g. `fd00:10:244::/64`; gateway: its first host); every pod then gets one address per family and a default route per family",
    })),
    bridge: Type.String({
      pattern: "^[^\\s/:]{1,15}$",
      description:
        "the node bridge every pod's host-side veth joins; it holds the gateways; created when missing, kept when the daemon stops (running pods stay connected)",
    }),
    forwarding: Type.Boolean({
      description:
        "set `net.ipv4.ip_forward=1` (and `net.ipv6.conf.all.forwarding=1` with IPv6), and `net.bridge.bridge-nf-call-iptables=1` where br_netfilter is loaded, when the bridge is set up; `false` leaves these node sysctls to the operator",
    }),
    plumbing: Type.Union([Type.Literal("netlink"), Type.Literal("iproute2")], {
      description:
        "`netlink`: plugs and unplugs of the default network and of macvlan/ipvlan attachments, and CHECK's reading of a pod's interface, are rtnetlink messages sent in-process (Deno FFI), and port security's macvlan/ipvlan tables are written in-process through libnftables; `iproute2`: one `ip -batch` process per namespace, and `nsenter` + `nft` for those tables. Netlink falls back to iproute2 (with a warning) where FFI cannot load",
    }),
    mtu: Type.Integer({
      minimum: 576,
      maximum: 65535,
      description:
        "MTU of the bridge and both veth ends; with `routing.mode` vxlan, at most the underlay interface's MTU less the VXLAN overhead (50 bytes)",
    }),
  }, { additionalProperties: false }),
  ipam: Type.Object({
    mode: Type.Union(
      [
        Type.Literal("local"),
        Type.Literal("kubernetes"),
        Type.Literal("pool"),
        Type.Literal("auto"),
      ],
      {
        description:
          "where the default network's ranges come from: `local`, `network.subnet` (and `subnet6`) on every node (standalone use, single-node clusters); `kubernetes`, the node's `spec.podCIDRs`; `pool`, blocks of Ferry's IPPools; `auto` (the DaemonSet's choice), `kubernetes` when the node has podCIDRs and `pool` otherwise, decided once per start",
      },
    ),
    pools: Type.Array(Type.String({ pattern: "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" }), {
      minItems: 1,
      description: "pool mode: the IPPools this node claims blocks of, in order of preference",
    }),
    reuseDelaySeconds: Type.Integer({
      minimum: 0,
      maximum: 3600,
      description:
        "a released address is not handed out again for this long (the reuse quarantine: until every node's NetworkPolicy tables have dropped it as the old pod's, see ipam.md); an ADD whose range has nothing else free waits for the earliest to come out, within its timeoutSeconds",
    }),
    blockReleaseSeconds: Type.Integer({
      minimum: 0,
      maximum: 86400,
      description:
        "pool mode: a block that stays empty this long is given back (the node's first block of each family stays)",
    }),
  }, { additionalProperties: false }),
  // Items typed as strings (an enum, not a union of literals), so that ajv checks uniqueness
  // without its deep-equality helper, which generated code would have to import.
  multiVifDrivers: Type.Array(
    Type.Unsafe<"npwg" | "noop">({ type: "string", enum: ["npwg", "noop"] }),
    {
      uniqueItems: true,
      description:
        "drivers asked for a pod's additional interfaces, in order: `npwg` (the `k8s.v1.cni.cncf.io/networks` annotation), `noop`; `[]` turns multi-network off",
    },
  ),
  multiNetwork: Type.Object({
    allowCrossNamespace: Type.Boolean({
      description: "a pod may select a NetworkAttachmentDefinition of another namespace",
    }),
    interfacePrefix: Type.String({
      pattern: "^[a-zA-Z][a-zA-Z0-9_-]{0,10}$",
      description: "names of additional interfaces without an explicit one: net → net1, net2, …",
    }),
    configDir: Type.String({
      description:
        "where a NetworkAttachmentDefinition without `spec.config` finds `<name>.conflist` (or `.conf`, `.json`)",
    }),
    allowedTypes: Type.Array(Type.String({ pattern: "^(\\*|[A-Za-z0-9][A-Za-z0-9_.-]*)$" }), {
      description:
        'plugin and IPAM types a NetworkAttachmentDefinition may use (`*`: every type); e.g. `["macvlan", "bridge", "static", "host-local", "tuning"]` keeps tenants off `host-device` and the rest',
    }),
    passthruParents: Type.Array(Type.String({ pattern: "^[^\\s/:]{1,127}$" }), {
      uniqueItems: true,
      description:
        "host devices (names or altnames) on which a NetworkAttachmentDefinition's macvlan may use mode `passthru` or `source` though the node uses them (they hold a node address, carry a default route, are Ferry's own, or lie under one of those: its lower device, its port): the pod then gets that device's traffic; on a device the node does not use these modes need no listing",
    }),
    anyMacParents: Type.Array(Type.String({ pattern: "^[^\\s/:]{1,127}$" }), {
      uniqueItems: true,
      description:
        "host devices (names or altnames) on which a NetworkAttachmentDefinition's macvlan (or a plugin after it) may give the pod any unicast MAC; elsewhere a MAC it picks must be locally administered and not one the node knows on the device's segment (its links', other pods', the device's neighbours')",
    }),
    whereaboutsIpam: Type.Union([Type.Literal("delegate"), Type.Literal("native")], {
      description:
        '`"type": "whereabouts"` IPAM of macvlan, ipvlan and bridge NADs: `native` serves it in the daemon with cluster-wide blocks (NetworkBlock objects), `delegate` runs the whereabouts plugin from CNI_PATH (the default: switching is a step of the migration from whereabouts, see docs/multiple-networks.md)',
    }),
    sharedWhereaboutsSpaces: Type.Array(
      Type.Object({
        network: Type.Optional(Type.String({
          pattern: "^[A-Za-z0-9._-]{0,200}$",
          description: 'the `network_name` ("": NADs without one); absent: any',
        })),
        range: Type.Optional(Type.String({
          pattern: "^[0-9A-Fa-f:.]+/[0-9]{1,3}$",
          description: "a CIDR: the entry covers the ranges inside it; absent: every range",
        })),
        namespaces: Type.Array(Type.String({ pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" }), {
          uniqueItems: true,
          description: "the namespaces whose NADs may use those ranges",
        }),
      }, { additionalProperties: false }),
      {
        description:
          'whereabouts address spaces served natively that several namespaces may use: a range of a space belongs to the namespace whose NAD first used it (a NetworkOwner object), and another namespace\'s NAD naming an overlapping range of that space is refused with code 7; an entry naming a `network` and/or a `range` gives those ranges to its `namespaces` instead (any other namespace is refused), e.g. `[{"network": "storage", "namespaces": ["team-a", "team-b"]}]` (see docs/multiple-networks.md)',
      },
    ),
  }, { additionalProperties: false }),
  gc: Type.Object({
    graceSeconds: Type.Integer({
      minimum: 0,
      maximum: 86400,
      description: "the reconcile loop never releases an attachment younger than this",
    }),
    intervalSeconds: Type.Integer({
      minimum: 0,
      maximum: 86400,
      description:
        "how often the sweep looks for attachments of gone pods and namespaces, and orphaned links and addresses (0: never); once also right after the pod cache syncs",
    }),
    maxRetries: Type.Integer({
      minimum: 0,
      maximum: 100,
      description: "retries of a failed release before it is given up (a Warning Event)",
    }),
    reclaimIntervalSeconds: Type.Integer({
      minimum: 1,
      maximum: 3600,
      description:
        "how often the Lease holder looks for blocks of deleted nodes (pool mode's IPBlocks, NAD networks' NetworkBlocks in every mode; the Lease lasts three intervals)",
    }),
    leaseNamespace: Type.String({
      pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
      description:
        "where Ferry's Leases live: `ferry-ipam-reclaim`, `ferry-ipam-claims` and each node's `ferry-node-<node>`",
    }),
  }, { additionalProperties: false }),
  routing: Type.Object({
    mode: Type.Union([Type.Literal("none"), Type.Literal("host-gw"), Type.Literal("vxlan")], {
      description:
        "`none`: pods reach the pods of their own node; `host-gw`: a route on this node to every other node's pod ranges (podCIDRs, or blocks in pool mode) via that node's InternalIP (nodes on one L2 segment); `vxlan`: an overlay (nodes anywhere the underlay routes UDP); both need an IPAM mode other than `local`",
    }),
    vxlan: Type.Object({
      vni: Type.Integer({
        minimum: 1,
        maximum: 16777215,
        description: "the overlay's VXLAN network identifier",
      }),
      port: Type.Integer({ minimum: 1, maximum: 65535, description: "UDP port of the overlay" }),
      device: Type.String({ pattern: "^[^\\s/:]{1,15}$", description: "the VXLAN device" }),
    }, { additionalProperties: false }),
  }, { additionalProperties: false }),
  masquerade: Type.Object({
    enabled: Type.Boolean({
      description:
        "traffic from this node's pods to anything that is not a pod range (nor in `nonMasqueradeCIDRs`) leaves with the node's address (nftables)",
    }),
    nonMasqueradeCIDRs: Type.Array(Type.String(), {
      description: "more destinations that see the pods' own addresses",
    }),
    table: Type.String({
      pattern: "^[a-zA-Z][a-zA-Z0-9_]{0,31}$",
      description: "the nftables table (family `inet`) Ferry owns and replaces whole",
    }),
  }, { additionalProperties: false }),
  pluginTimeoutSeconds: Type.Number({
    exclusiveMinimum: 0,
    description:
      "a delegated or IPAM plugin still running after this long is killed with every process it started (it runs in a process group and session of its own), and the request fails with code 5 saying so; a plugin printing more than 1 MiB on stdout or stderr is killed the same way",
  }),
  maxRequestBytes: Type.Integer({
    minimum: 1024,
    description: "largest request body on the socket; larger requests get CNI error 6",
  }),
  server: Type.Object({
    readTimeoutSeconds: Type.Number({
      exclusiveMinimum: 0,
      description:
        "a request (head and body) must arrive whole within this; a slow or stalled client gets 408 / CNI error 6 and its connection is closed",
    }),
    writeTimeoutSeconds: Type.Number({
      exclusiveMinimum: 0,
      description: "a client must take its answer within this",
    }),
    maxConnections: Type.Integer({
      minimum: 1,
      description:
        "connections served at once; past it a client is answered at once with CNI error 11 (the runtime retries), and the daemon logs when the limit is reached and when it recovers",
    }),
    httpHost: Type.String({
      description:
        "where `/healthz`, `/readyz` (the DaemonSet's probes) and `/metrics` (Prometheus text) are served over TCP. Any local process can connect, so the port has the socket's bounds: read and write timeouts, a 16 KiB request head, `server.maxConnections` of its own",
    }),
    httpPort: Type.Integer({
      minimum: -1,
      maximum: 65535,
      description:
        "the port of `/healthz`, `/readyz` and `/metrics` (0: any free one; -1: none); an accept that fails (the process out of descriptors) is retried, never fatal",
    }),
    metricsHost: Type.String({
      description:
        "where a second listener serves the same for scrapers (`0.0.0.0`: the node's addresses, under hostNetwork); its own connections and bounds, so clients filling it never delay the probes on localhost",
    }),
    metricsPort: Type.Integer({
      minimum: -1,
      maximum: 65535,
      description:
        "the scrapers' port (the DaemonSet: 9668, with `prometheus.io/scrape` annotations on its pods; 0: any free one; -1: none)",
    }),
    metricsDetailTokenFile: Type.String({
      description:
        "a file holding the token a scraper sends (`Authorization: Bearer <token>`; Prometheus: `authorization.credentials_file`) to see, on the scrapers' port, the labels naming tenants' objects (`pod`, `policy`, `rule`, `network`); without it they are left out and their series summed, and a wrong token is answered 401. Read at each request; empty: no scraper sees them (the localhost port and the socket always show them)",
    }),
  }, { additionalProperties: false }),
  shutdownTimeoutSeconds: Type.Number({
    minimum: 0,
    description:
      "how long SIGTERM waits for in-flight requests; plugins still running then are killed, and so is every `nft`, `ip` or `nsenter` the daemon started that still runs as it stops. The whole stop ends within this plus 5 s whatever is in flight: past that the daemon exits with a last log line naming what it abandoned. Signal the daemon's own process (`npx` does not pass SIGTERM on)",
  }),
  nice: Type.Integer({
    minimum: -20,
    maximum: 19,
    description:
      "the daemon's CPU priority: every thread's nice value, taken at start (threads and processes started later inherit it); `0` leaves the priority it was started with. Each ADD's shim waits for the daemon, and under a burst of pod starts the shims' own Deno starts would otherwise get as much CPU as the daemon. A negative value needs `CAP_SYS_NICE`; without it the daemon says so and runs at its start priority",
  }),
  logLevel: Type.Union([
    Type.Literal("trace"),
    Type.Literal("debug"),
    Type.Literal("info"),
    Type.Literal("warning"),
    Type.Literal("error"),
    Type.Literal("fatal"),
  ], {
    description:
      "every CNI request gets a line naming command, pod, container and interface (`debug` adds one when it arrives); SIGHUP re-reads the config file and applies its `logLevel` without a restart (other settings need one)",
  }),
  policy: Type.Object({
    enabled: Type.Boolean({
      description:
        "enforce Kubernetes NetworkPolicy on this node's pods, and MultiNetworkPolicy on their additional interfaces (needs the API; see network-policy.md)",
    }),
    table: Type.String({
      pattern: "^[A-Za-z][A-Za-z0-9_-]*$",
      description:
        "the nftables table (family `inet`) the policies are written to: on the node for NetworkPolicy, in each pod's network namespace for MultiNetworkPolicy; it exists only while some pod (interface) is isolated",
    }),
    logDenied: Type.Boolean({
      description:
        "write one log line per denied connection (NetworkPolicy), naming the isolated pod, its peer and the policies that isolate it: the drop rules log to NFLOG group `policy.logGroup`, which the daemon reads",
    }),
    logGroup: Type.Integer({
      minimum: 1,
      maximum: 65535,
      description:
        "the NFLOG group denied packets are logged to (one reader per group on a node: pick one no other program uses)",
    }),
    logPerSecond: Type.Integer({
      minimum: 1,
      maximum: 10000,
      description:
        "denied packets logged per second at most, per pod and direction in the kernel and in all by the daemon (the rest are counted and said once a second)",
    }),
    limits: Type.Object({
      policyEntries: Type.Integer({
        minimum: 1,
        description:
          "entries (peers, ipBlock excepts and ports, over all its rules) one NetworkPolicy may hold; a policy over it is refused as a whole: the pods it selects are isolated without what it allows, with a Warning Event `PolicyTooLarge` on it",
      }),
      namespaceEntries: Type.Integer({
        minimum: 1,
        description:
          "entries the NetworkPolicies of one namespace may hold together, taken in name order; the policy that would bring the namespace over it, and each after it that would too, is refused as `policy.limits.policyEntries` says",
      }),
    }, { additionalProperties: false }),
  }, { additionalProperties: false }),
  portSecurity: Type.Object({
    enabled: Type.Boolean({
      description:
        "drop what a pod sends as someone else (another source MAC, IPv4 or IPv6 source, ARP sender, neighbour advertisement target; router advertisements, redirects, DHCP server replies) on the interfaces Ferry plugs: on the host side before it reaches the bridge, another pod or the node (default network, native NAD bridges), in the pod's namespace for macvlan and ipvlan (see security.md)",
    }),
    table: Type.String({
      pattern: "^[A-Za-z][A-Za-z0-9_-]*$",
      description:
        "the nftables table (family `bridge`) port security is written to on the node; it stays while the daemon restarts, and is removed when port security is turned off and by the uninstall",
    }),
    allowSourcePrefixesAnnotation: Type.Boolean({
      description:
        "honour a pod's `ferry.dev/allowed-source-prefixes` annotation (comma-separated CIDRs it may also send from: a VPN gateway, a router in a pod); when off, the annotation is refused with a Warning Event on the pod and a log line, and the pod sends from its own addresses only",
    }),
  }, { additionalProperties: false }),
  logFormat: Type.Union([Type.Literal("json"), Type.Literal("text")], {
    description:
      "`json`: one object per line (`@timestamp`, `level`, `message`, `logger`, `properties`) for log collectors; `text`: `time LEVEL logger: sentence`, what the DaemonSet uses so that `kubectl logs` reads as sentences",
  }),
}, { additionalProperties: false });

/** The daemon configuration. */
export type DaemonConfig = Static<typeof DaemonConfigSchema>;
