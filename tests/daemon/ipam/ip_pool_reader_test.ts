import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { ipPoolReader } from "../../../daemon/ipam/ip_pool_reader.ts";
import { KubeApiError } from "../../../daemon/k8s/errors.ts";
import type { IpPoolObject } from "../../../daemon/ipam/ip_pools.ts";

/** A client whose list answers with `answer()` and counts its calls. */
function countingClient(answer: () => Promise<{ items: IpPoolObject[]; resourceVersion: string }>) {
  const client = {
    lists: 0,
    listAll<T>(): Promise<{ items: T[]; resourceVersion: string }> {
      client.lists++;
      return answer() as Promise<{ items: T[]; resourceVersion: string }>;
    },
  };
  return client;
}

const pool = { metadata: { name: "p" }, spec: { cidrs: ["10.9.0.0/16"] } } as IpPoolObject;
const other = { metadata: { name: "q" }, spec: { cidrs: ["10.8.0.0/16"] } } as IpPoolObject;

/** A counting client whose lists answer only when the test resolves them, in order. */
function deferredClient() {
  const answers: PromiseWithResolvers<{ items: IpPoolObject[]; resourceVersion: string }>[] = [];
  const client = countingClient(() => {
    const d = Promise.withResolvers<{ items: IpPoolObject[]; resourceVersion: string }>();
    answers.push(d);
    return d.promise;
  });
  return { client, answers };
}

Deno.test("a burst of reads lists the pools once while the list is kept", async () => {
  const client = countingClient(() => Promise.resolve({ items: [pool], resourceVersion: "1" }));
  const read = ipPoolReader(client, undefined, 60_000);
  const got = await Promise.all(Array.from({ length: 20 }, () => read()));
  await read();
  assertEquals(got.every((g) => g.length === 1 && g[0] === pool), true);
  assertEquals(client.lists, 1, "every read after the first must use the kept list");
});

Deno.test("a cluster without the IPPool CRD has no pools, and that answer is kept (no list per ADD)", async () => {
  const client = countingClient(() =>
    Promise.reject(new KubeApiError(404, "NotFound", "the server could not find the resource"))
  );
  const read = ipPoolReader(client, undefined, 60_000);
  for (let i = 0; i < 10; i++) assertEquals(await read(), [], `read ${i}: no CRD means no pools`);
  assertEquals(
    client.lists,
    1,
    "the NotFound answer must be kept like a list (it was listed again on every read)",
  );
});

Deno.test("a failed list is not kept: the next read lists again", async () => {
  let fail = true;
  const client = countingClient(() =>
    fail
      ? Promise.reject(new KubeApiError(503, "ServiceUnavailable", "etcd is away"))
      : Promise.resolve({ items: [pool], resourceVersion: "1" })
  );
  const read = ipPoolReader(client, undefined, 60_000);
  await assertRejects(() => read(), KubeApiError);
  fail = false;
  assertEquals(
    (await read()).length,
    1,
    "the read after a failure must list again and see the pool",
  );
  assertEquals(client.lists, 2);
});

Deno.test("a listed pool watch answers without any list", async () => {
  const client = countingClient(() => Promise.resolve({ items: [], resourceVersion: "1" }));
  const read = ipPoolReader(client, { synced: true, allPools: () => [pool] }, 60_000);
  assertEquals(await read(), [pool]);
  assertEquals(client.lists, 0);
});

Deno.test("reads during a refresh get the list it replaces, never one older than twice keepMs", async () => {
  let clock = 0;
  const { client, answers } = deferredClient();
  const read = ipPoolReader(client, undefined, 1000, () => clock);
  const first = read();
  answers[0].resolve({ items: [pool], resourceVersion: "1" });
  assertEquals(await first, [pool]);
  clock = 1500; // kept no more, but less than 2 × keepMs old
  assertEquals(await read(), [pool], "a refresh under way: the previous list answers at once");
  assertEquals(client.lists, 2, "the refresh was asked for");
  assertEquals(await read(), [pool], "still under way: the previous list again, no third list");
  assertEquals(client.lists, 2);
  answers[1].resolve({ items: [pool, other], resourceVersion: "2" });
  await answers[1].promise;
  await new Promise((r) => setTimeout(r, 0)); // let the refresh's handlers run
  assertEquals((await read()).length, 2, "the refreshed list answers once it is in");
  clock = 10_000; // the newest list is 8.5 s old: more than 2 × keepMs
  const late = read();
  answers[2].resolve({ items: [other], resourceVersion: "3" });
  assertEquals(
    await late,
    [other],
    "a list older than 2 × keepMs is never answered: the read waits",
  );
});

Deno.test("while a refresh hangs, the list it replaces answers only until it is twice keepMs old", async () => {
  let clock = 0;
  const { client, answers } = deferredClient();
  const read = ipPoolReader(client, undefined, 1000, () => clock);
  const first = read();
  answers[0].resolve({ items: [pool], resourceVersion: "1" });
  await first;
  clock = 1900; // a refresh starts, and hangs
  assertEquals(await read(), [pool], "1.9 s old: still answered");
  clock = 2850; // the refresh still hangs; the list is now older than 2 × keepMs
  const late = read();
  const state = await Promise.race([
    late.then(() => "answered"),
    new Promise((r) => setTimeout(() => r("waiting"), 0)),
  ]);
  assertEquals(state, "waiting", "a list 2.85 s old was answered (the limit is 2 s)");
  assertEquals(client.lists, 2, "no third list while the refresh is under way");
  answers[1].resolve({ items: [other], resourceVersion: "2" });
  assertEquals(await late, [other], "the read waited for the refresh");
});
