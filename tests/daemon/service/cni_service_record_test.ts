// ADD writes the attachment's record while the driver still plugs (once the driver announces the
// result), and puts it in place only when the plug succeeded.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { AttachmentStore } from "../../../daemon/records/attachment_store.ts";
import { CniService } from "../../../daemon/service/cni_service.ts";
import type { DefaultNetwork } from "../../../daemon/service/default_network.ts";
import type { AddContext, Driver, Plugged } from "../../../daemon/drivers/driver.ts";
import { NetnsGuard } from "../../../daemon/net/netns_guard.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import type { CniRequest } from "../../../lib/envelope.ts";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import type { CniResult } from "../../../lib/cni/schemas.ts";

/** Any path is a pod's namespace. */
const podNamespaces = () => {
  const pod = () => ({ dev: 7, ino: 2, isFile: true });
  return new NetnsGuard([{ dev: 7, ino: 1 }], () => Promise.resolve(pod()), pod);
};

/**
 * A delegated driver that announces its result, then runs `rest` (the plug's remainder), then
 * returns the result or fails.
 */
function announcingDriver(rest: () => Promise<void>): Driver & { released: string[] } {
  const released: string[] = [];
  return {
    released,
    async add(ctx: AddContext): Promise<Plugged> {
      const result: CniResult = {
        cniVersion: "1.1.0",
        interfaces: [{ name: ctx.key.ifname, sandbox: ctx.netns }],
        ips: [{ address: "10.9.0.2/24", interface: 0 }],
      };
      ctx.resultKnown?.(result, undefined);
      await rest();
      return { result };
    },
    del(ctx) {
      released.push(ctx.key.containerId);
      return Promise.resolve();
    },
  } as Driver & { released: string[] };
}

function service(store: AttachmentStore, delegate: Driver): CniService {
  const unused = {} as Driver;
  return new CniService({
    network: {} as DefaultNetwork,
    networkWaitMs: 1000,
    drivers: { macvlan: unused, ipvlan: unused, delegate, "nad-bridge": unused },
    store,
    netns: podNamespaces(),
    isReady: () => true,
    logger: getLogger(["ferry", "test"]),
  });
}

const add = (containerId: string): CniRequest => ({
  command: "ADD",
  containerId,
  netns: "/var/run/netns/p",
  ifname: "net1",
  args: {},
  path: [],
  config: {
    cniVersion: "1.1.0",
    name: "lan",
    type: "ferry",
    attachment: { type: "vlan", master: "eth1" },
  } as CniRequest["config"],
});

async function files(dir: string): Promise<string[]> {
  const names = [];
  for await (const e of Deno.readDir(dir)) names.push(e.name);
  return names.sort();
}

Deno.test("the record is written while the plug goes on, seen by no one until the plug succeeded, then put in place", async () => {
  await withTempDir(async (dir) => {
    const store = await AttachmentStore.open(dir);
    const seen: string[][] = [];
    const driver = announcingDriver(async () => {
      // The rest of the plug: the record's file is written meanwhile, and not in place.
      for (let i = 0; i < 100 && (await files(dir)).length === 0; i++) {
        await new Promise((r) => setTimeout(r, 5));
      }
      seen.push(await files(dir));
      assertEquals(store.get({ containerId: "c1", ifname: "net1" }), undefined);
    });
    const result = await service(store, driver).add(add("c1"));
    assertEquals(seen, [[".c1--net1.json.tmp"]]);
    assertEquals(await files(dir), ["c1--net1.json"]);
    const record = store.get({ containerId: "c1", ifname: "net1" });
    assert(record?.result === result);
    assertEquals((await AttachmentStore.open(dir)).get({ containerId: "c1", ifname: "net1" }), {
      ...record,
    });
  });
});

Deno.test("a plug that fails after announcing its result leaves no record and no file behind", async () => {
  await withTempDir(async (dir) => {
    const store = await AttachmentStore.open(dir);
    const driver = announcingDriver(async () => {
      await new Promise((r) => setTimeout(r, 20)); // the record's file is written meanwhile
      throw new CniError(CNI_ERROR.IO_FAILURE, "failed to configure net1");
    });
    const e = await assertRejects(() => service(store, driver).add(add("c2")), CniError);
    assertEquals(e.message, "failed to configure net1");
    assertEquals(store.list(), []);
    assertEquals(await files(dir), []);
  });
});

Deno.test("a record whose file cannot be written rolls the plug back with code 5", async () => {
  await withTempDir(async (dir) => {
    const store = await AttachmentStore.open(`${dir}/attachments`);
    await Deno.remove(`${dir}/attachments`); // the store's directory is gone: no file can be made
    const driver = announcingDriver(() => Promise.resolve());
    const e = await assertRejects(() => service(store, driver).add(add("c3")), CniError);
    assertEquals([e.code, e.message], [CNI_ERROR.IO_FAILURE, "cannot record the attachment"]);
    assertEquals(driver.released, ["c3"], "unplugged again");
    assertEquals(store.list(), []);
  });
});
