// The reuse quarantine through the shim and the daemon: an ADD whose range's only free addresses
// are quarantined waits for the earliest, within its timeoutSeconds.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cniEnv, netconf, withFerry } from "../../daemon/dev/harness.ts";
import { IS_ROOT, uniqueToken, withNetns } from "../../daemon/dev/netns.ts";

const opts = { ignore: !IS_ROOT };
const env = cniEnv;
const podAddress = (result: Record<string, unknown>) =>
  (result.ips as { address: string }[])[0].address.split("/")[0];

/** A fresh /28 of 10.100-103.x.y, and its second host address (the first the pool hands out). */
function fresh28(): { subnet: string; second: string } {
  const n = Math.floor(Math.random() * 4096);
  const base = `10.${100 + (n >> 10)}.${(n >> 2) & 255}`;
  const at = (n & 3) * 16;
  return { subnet: `${base}.${at}/28`, second: `${base}.${at + 2}` };
}

Deno.test({
  name:
    "a /28's rolling update through the shim (DEL one pod, ADD one, repeated) never answers 101: each ADD waits out the 1 s quarantine",
  ...opts,
  fn: () => {
    const { subnet } = fresh28();
    return withFerry({
      config: { network: { subnet }, ipam: { reuseDelaySeconds: 1 } },
    }, (ferry) =>
      withNetns(13, async (nss) => {
        const ids = nss.map(() => `q${uniqueToken()}`);
        const held: string[] = [];
        for (const [i, ns] of nss.entries()) {
          const add = await ferry.shim(env("ADD", ns, ids[i]), netconf());
          assertEquals(add.code, 0, add.stdout + add.stderr);
          held.push(podAddress(add.json!));
        }
        assertEquals(new Set(held).size, 13, "the whole range is in use");
        for (let round = 0; round < 3; round++) {
          assertEquals((await ferry.shim(env("DEL", nss[round], ids[round]), netconf())).code, 0);
          const next = `r${uniqueToken()}`;
          const started = Date.now();
          const add = await ferry.shim(env("ADD", nss[round], next), netconf());
          assertEquals(add.code, 0, `round ${round}: ${add.stdout}${add.stderr}`);
          assertEquals(podAddress(add.json!), held[round], `round ${round}: the address released`);
          assert(Date.now() - started >= 500, `round ${round}: answered before the quarantine`);
          ids[round] = next;
        }
        for (const [i, ns] of nss.entries()) {
          assertEquals((await ferry.shim(env("DEL", ns, ids[i]), netconf())).code, 0);
        }
      }));
  },
});

Deno.test({
  name:
    "an ADD whose timeoutSeconds ends before its range's quarantine answers 101 at once, naming the quarantine",
  ...opts,
  fn: () => {
    const { subnet, second } = fresh28();
    return withFerry({
      // One allocatable address, a quarantine far longer than the config's 3 s timeout.
      config: {
        network: { subnet, rangeStart: second, rangeEnd: second },
        ipam: { reuseDelaySeconds: 60 },
      },
    }, (ferry) =>
      withNetns(2, async ([ns1, ns2]) => {
        const conf = netconf("1.0.0", { timeoutSeconds: 3 });
        const [a, b] = [`a${uniqueToken()}`, `b${uniqueToken()}`];
        assertEquals((await ferry.shim(env("ADD", ns1, a), conf)).code, 0);
        assertEquals((await ferry.shim(env("DEL", ns1, a), conf)).code, 0);
        const full = await ferry.shim(env("ADD", ns2, b), conf);
        assertEquals([full.code, full.json?.code], [1, 101], full.stdout);
        const msg = String(full.json?.msg);
        assert(msg.includes("reuse quarantine"), msg);
        assert(msg.includes("ipam.reuseDelaySeconds"), msg);
        assertEquals(await ferry.allocations(), [], "nothing allocated");
      }));
  },
});
