/**
 * What pods forged, as port security's drop counters tell it: the counters by pod (for the
 * metrics), and the reporter that says each pod's forgeries once per read of the counters, in a
 * log line and a Warning Event.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Attachment } from "../records/attachment_store.ts";
import type { PortDrops } from "./port_guard.ts";

/**
 * The drop counters by pod (the port's attachment record names it; an unnamed port counts as
 * its port's name in no namespace), for the metrics.
 *
 * @example
 * ```ts
 * spoofedByPod(guard.counts(), store.list()); // [{ namespace: "default", pod: "evil", kind: "arp", packets: 2 }]
 * ```
 */
export function spoofedByPod(
  drops: PortDrops[],
  records: Pick<Attachment, "hostIfname" | "pod">[],
): { namespace: string; pod: string; kind: string; packets: number }[] {
  const byPort = new Map(records.filter((r) => r.hostIfname).map((r) => [r.hostIfname!, r.pod]));
  return drops.map((d) => {
    const pod = byPort.get(d.port);
    return {
      namespace: pod?.namespace ?? "",
      pod: pod?.name ?? d.port,
      kind: d.kind,
      packets: d.packets,
    };
  });
}

/** What {@link spoofingReporter} needs. */
export interface SpoofingReporterDeps {
  /** The attachment records (which pod a port is). */
  records(): Pick<Attachment, "hostIfname" | "pod">[];
  /** Where the lines go. */
  logger: Logger;
  /** Records a Warning Event on a pod (with Kubernetes). */
  event?(namespace: string, name: string, reason: string, message: string): void;
}

/**
 * Says what pods forged since the counters were last read: one log line and one Warning Event
 * (`SpoofedFramesDropped`) per pod and kind, at most once per read of the counters (10 s).
 *
 * @example
 * ```ts
 * guard.startCounting(10_000, spoofingReporter({ records: () => store.list(), logger }));
 * ```
 */
export function spoofingReporter(d: SpoofingReporterDeps): (increases: PortDrops[]) => void {
  return (increases) => {
    for (const s of spoofedByPod(increases, d.records())) {
      const what = `${s.packets} frame(s) forging ${KIND_WORDS[s.kind] ?? s.kind}`;
      d.logger.warn("pod {namespace}/{pod} sent {what}: dropped by port security", {
        namespace: s.namespace,
        pod: s.pod,
        kind: s.kind,
        packets: s.packets,
        what,
      });
      if (s.namespace) {
        d.event?.(
          s.namespace,
          s.pod,
          "SpoofedFramesDropped",
          `port security dropped ${what} sent by this pod`,
        );
      }
    }
  };
}

/** What each kind of drop forged, in words. */
const KIND_WORDS: Record<string, string> = {
  mac: "another source MAC",
  ethertype: "a protocol other than IPv4, IPv6 and ARP (or a VLAN tag)",
  arp: "another ARP sender",
  ipv4: "another IPv4 source",
  ipv6: "another IPv6 source",
  nd: "a neighbour advertisement for another address, or neighbour discovery naming another MAC",
  ra: "a router advertisement",
  redirect: "a redirect",
  dhcp: "a DHCP server's message",
  tunnel: "a datagram to the node's VXLAN port (an encapsulated frame)",
  linklocal: "broadcast, multicast or link-local data to other pods",
  unlisted: "anything from a port port security does not list",
};
