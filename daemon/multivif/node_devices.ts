/**
 * The node's devices a NAD must not take, and how a plugin finds a device by a sysfs path: the
 * effects the NAD guard needs (`nad_guard.ts`), behind one interface so its tests can hand in a
 * fake.
 *
 * What Ferry protects: its bridge and VXLAN device, and every port of its bridge (the host ends of
 * the pods' veths, whose traffic is another pod's). Each is known by every name the kernel finds it
 * by (its name and its altnames: a lookup by name also matches an altname) and by its MAC (what
 * `host-device`'s `hwaddr` matches).
 *
 * @module
 */
import type { IpRunner } from "../net/ip_runner.ts";

/** One device Ferry protects. */
export interface ProtectedDevice {
  /** Its name. */
  name: string;
  /** Its alternative names (`ip link property add … altname`). */
  altnames: string[];
  /** Its MAC, lower case with colons, when it has one. */
  mac?: string;
}

/** What the guard asks of the node. */
export interface NodeDevices {
  /** The devices Ferry protects now (see the module doc). */
  protectedDevices(): Promise<ProtectedDevice[]>;
  /**
   * The network interface names a sysfs device directory holds (`<dir>/net/*`), as
   * `host-device` reads them for `kernelpath` and `pciBusID`; none when it has none.
   */
  netdevsUnder(dir: string): Promise<string[]>;
}

interface IpLink {
  ifname: string;
  address?: string;
  altnames?: string[];
  master?: string;
}

/**
 * The node's devices read with iproute2 and sysfs.
 *
 * @example
 * ```ts
 * const devices = new SystemNodeDevices(ip, ["ferry0", "ferry.vxlan"], "ferry0");
 * await devices.protectedDevices();
 * ```
 */
export class SystemNodeDevices implements NodeDevices {
  readonly #ip: IpRunner;
  readonly #names: string[];
  readonly #bridge: string;
  readonly #netns?: string;

  /**
   * `names` are Ferry's own devices, `bridge` the one whose ports are protected too; `netns`
   * (a path) reads another namespace's links (tests).
   */
  constructor(ip: IpRunner, names: string[], bridge: string, netns?: string) {
    this.#ip = ip;
    this.#names = names;
    this.#bridge = bridge;
    this.#netns = netns;
  }

  /** Ferry's devices and its bridge's ports, with altnames and MACs. */
  async protectedDevices(): Promise<ProtectedDevice[]> {
    const out = await this.#ip.batch(["link show"], { json: true, netns: this.#netns });
    const links = JSON.parse(out || "[]") as IpLink[];
    return links
      .filter((l) => this.#names.includes(l.ifname) || l.master === this.#bridge)
      .map((l) => ({
        name: l.ifname,
        altnames: l.altnames ?? [],
        ...(l.address ? { mac: l.address.toLowerCase() } : {}),
      }));
  }

  /** `<dir>/net/*`, or none when it cannot be read. */
  async netdevsUnder(dir: string): Promise<string[]> {
    try {
      return (await Array.fromAsync(Deno.readDir(`${dir}/net`))).map((e) => e.name);
    } catch {
      return [];
    }
  }
}
