import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { type NetlinkSys, SyscallError } from "../../../../daemon/net/netlink/libc.ts";
import { NetlinkRefusal } from "../../../../daemon/net/netlink/route_socket.ts";
import { RouteSocketPool } from "../../../../daemon/net/netlink/socket_pool.ts";

/** A system that only opens and closes sockets, and says which are open. */
function countingSys() {
  let next = 100;
  const open = new Set<number>();
  const made: number[] = [];
  const unused = () => {
    throw new Error("not used by the pool");
  };
  const sys: NetlinkSys = {
    netlinkSocket: () => {
      const fd = next++;
      open.add(fd);
      made.push(fd);
      return fd;
    },
    close: (fd) => {
      if (!open.delete(fd)) throw new Error(`closed ${fd} twice or never opened`);
    },
    send: unused,
    recv: unused,
    sendOffThread: unused,
    recvOffThread: unused,
    tryRecv: unused,
    ifIndex: unused,
    openRead: unused,
    identity: unused,
    writeFile: unused,
    inNetns: unused,
  };
  return { sys, open, made };
}

/** The descriptor behind a socket of the pool (what the request was sent on). */
const fdOf = async (pool: RouteSocketPool, sys: { made: number[] }) => {
  await pool.use(() => Promise.resolve());
  return sys.made.at(-1);
};

Deno.test("one socket serves request after request: none is opened or closed per request", async () => {
  const s = countingSys();
  const pool = new RouteSocketPool(s.sys);
  for (let i = 0; i < 5; i++) await pool.use(() => Promise.resolve(i));
  assertEquals(s.made.length, 1);
  assertEquals(s.open.size, 1);
  assertEquals(pool.idle, 1);
  pool.close();
  assertEquals(s.open.size, 0);
});

Deno.test("requests at the same time each get a socket of their own; a burst leaves at most the idle bound open", async () => {
  const s = countingSys();
  const pool = new RouteSocketPool(s.sys, 2);
  const release = Promise.withResolvers<void>();
  const seen = new Set<unknown>();
  const burst = Array.from({ length: 5 }, () =>
    pool.use(async (sock) => {
      seen.add(sock);
      await release.promise;
    }));
  assertEquals(seen.size, 5, "two requests shared a socket");
  assertEquals(s.open.size, 5);
  release.resolve();
  await Promise.all(burst);
  assertEquals(pool.idle, 2);
  assertEquals(s.open.size, 2);
  pool.close();
  assertEquals(s.open.size, 0);
});

Deno.test("a socket whose send or receive failed is closed, and the next request gets a new one", async () => {
  const s = countingSys();
  const pool = new RouteSocketPool(s.sys);
  const first = await fdOf(pool, s);
  await assertRejects(
    () => pool.use(() => Promise.reject(new SyscallError("netlink recv", 11))),
    SyscallError,
    "netlink recv",
  );
  assertEquals(s.open.has(first!), false, "the failed socket stayed open");
  assertEquals(pool.idle, 0);
  const second = await fdOf(pool, s);
  assertEquals(second !== first, true);
  pool.close();
  assertEquals(s.open.size, 0);
});

Deno.test("a socket whose request the kernel refused goes back to the pool, the refusal to the caller", async () => {
  const s = countingSys();
  const pool = new RouteSocketPool(s.sys);
  await assertRejects(
    () => pool.use(() => Promise.reject(new NetlinkRefusal("delete fy1", 19))),
    NetlinkRefusal,
    "delete fy1",
  );
  assertEquals(pool.idle, 1);
  await pool.use(() => Promise.resolve());
  assertEquals(s.made.length, 1);
  pool.close();
});

Deno.test("anything else thrown during a request closes its socket", async () => {
  const s = countingSys();
  const pool = new RouteSocketPool(s.sys);
  await assertRejects(() => pool.use(() => Promise.reject(new Error("a bug"))), Error, "a bug");
  assertEquals(s.open.size, 0);
  assertEquals(pool.idle, 0);
});

Deno.test("a closed pool closes the sockets still in use when their requests end", async () => {
  const s = countingSys();
  const pool = new RouteSocketPool(s.sys);
  const release = Promise.withResolvers<void>();
  const running = pool.use(() => release.promise);
  pool.close();
  assertEquals(s.open.size, 1);
  release.resolve();
  await running;
  assertEquals(s.open.size, 0);
  assertEquals(pool.idle, 0);
});
