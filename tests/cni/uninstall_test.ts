// cni/uninstall.ts removes everything Ferry leaves on a node, and reports only what it removed.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { uninstallNode } from "../../cni/uninstall.ts";
import { copyMissingPlugins } from "../../cni/install.ts";
import { IS_ROOT, run, uniqueToken } from "../../daemon/dev/netns.ts";

const exists = (p: string) => Deno.stat(p).then(() => true, () => false);
const link = (name: string) => run("ip", "link", "show", name).then(() => true, () => false);

Deno.test({
  name:
    "uninstalling a node removes the conflist, the shim, Ferry's links, bridge, routes, nftables tables and state, and only those",
  ignore: !IS_ROOT,
  fn: async () => {
    const t = uniqueToken().slice(0, 6);
    const dir = await Deno.makeTempDir({ prefix: "ferry-uninstall-" });
    const bridge = `fu${t}`, port = `fy${t}u`, other = `xu${t}`, table = `ferryu${t}`;
    const node = {
      binDir: `${dir}/bin`,
      confDir: `${dir}/conf`,
      bridge,
      vxlanDevice: `fv${t}`,
      nftTable: table,
      policyTable: `${table}p`,
      guardTable: `${table}g`,
      stateDir: `${dir}/state`,
      socketDir: `${dir}/run`,
    };
    try {
      for (const d of [node.binDir, node.confDir, node.stateDir, node.socketDir]) {
        await Deno.mkdir(d, { recursive: true });
      }
      for (const f of ["ferry", "ferry-deno", "ferry-shim.js", "bridge"]) {
        await Deno.writeTextFile(`${node.binDir}/${f}`, "x");
      }
      await Deno.writeTextFile(`${node.confDir}/10-ferry.conflist`, "{}");
      await Deno.writeTextFile(`${node.confDir}/20-other.conflist`, "{}");
      await run("ip", "link", "add", bridge, "type", "bridge");
      await run("ip", "link", "add", port, "type", "veth", "peer", "name", other);
      await run("ip", "link", "set", port, "master", bridge);
      await run("nft", "add", "table", "inet", table);
      await run("nft", "add", "table", "inet", `${table}p`);
      await run("nft", "add", "table", "bridge", `${table}g`);
      const removed = await uninstallNode(node);
      assertEquals(
        await Promise.all(
          ["ferry", "ferry-deno", "ferry-shim.js"].map((f) => exists(`${node.binDir}/${f}`)),
        ),
        [false, false, false],
      );
      assert(await exists(`${node.binDir}/bridge`), "another plugin stays");
      assertEquals(await exists(`${node.confDir}/10-ferry.conflist`), false);
      assert(await exists(`${node.confDir}/20-other.conflist`), "another conflist stays");
      assertEquals([await link(bridge), await link(port)], [false, false]);
      assert(!(await run("nft", "list", "tables")).includes(`inet ${table}`));
      assert(!(await run("nft", "list", "tables")).includes(`inet ${table}p`), "the policy table");
      assert(
        !(await run("nft", "list", "tables")).includes(`bridge ${table}g`),
        "the port security table",
      );
      assertEquals([await exists(node.stateDir), await exists(node.socketDir)], [false, false]);
      assert(
        removed.includes(`bridge ${bridge}`) && removed.includes(`link ${port}`),
        removed.join(),
      );
      // Run again: nothing of it is left to remove.
      assertEquals(await uninstallNode(node), []);
    } finally {
      await run("ip", "link", "del", bridge).catch(() => {});
      await run("ip", "link", "del", port).catch(() => {});
      await run("nft", "delete", "table", "inet", table).catch(() => {});
      await run("nft", "delete", "table", "inet", `${table}p`).catch(() => {});
      await run("nft", "delete", "table", "bridge", `${table}g`).catch(() => {});
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});

Deno.test({
  name:
    "the install copies the reference plugins the host lacks, never replacing one, and the uninstall removes only those it copied",
  ignore: !IS_ROOT,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "ferry-plugins-" });
    try {
      const image = `${dir}/image`, bin = `${dir}/bin`;
      await Deno.mkdir(image);
      await Deno.mkdir(bin);
      for (const p of ["portmap", "static", "bridge"]) {
        await Deno.writeTextFile(`${image}/${p}`, `image ${p}`);
      }
      await Deno.writeTextFile(`${bin}/bridge`, "the host's own");
      assertEquals(await copyMissingPlugins(image, bin), ["portmap", "static"]);
      assertEquals(await Deno.readTextFile(`${bin}/bridge`), "the host's own");
      assertEquals(await Deno.readTextFile(`${bin}/static`), "image static");
      assertEquals((await Deno.stat(`${bin}/static`)).mode! & 0o777, 0o755);
      // Again: nothing more to copy, the record unchanged.
      assertEquals(await copyMissingPlugins(image, bin), []);
      await uninstallNode({
        binDir: bin,
        confDir: `${dir}/conf`,
        bridge: `fp${uniqueToken().slice(0, 6)}`,
        vxlanDevice: `fpv${uniqueToken().slice(0, 5)}`,
        nftTable: `ferryp${uniqueToken().slice(0, 6)}`,
        stateDir: `${dir}/state`,
        socketDir: `${dir}/run`,
      });
      assertEquals((await Array.fromAsync(Deno.readDir(bin))).map((e) => e.name), ["bridge"]);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
