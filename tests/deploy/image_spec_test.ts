// deploy/Dockerfile (for builders with a registry) and `deno task image` (built here from Debian
// packages) make the same image: both follow deploy/image_spec.ts.
import { assertEquals } from "deno-std/assert/mod.js";
import {
  IMAGE_CACHED,
  IMAGE_CMD,
  IMAGE_ENTRYPOINT,
  IMAGE_ENV,
  IMAGE_PACKAGES,
  IMAGE_PRUNE,
  IMAGE_SHIM_BUNDLE,
  IMAGE_SOURCES,
  IMAGE_WORKDIR,
} from "../../deploy/image_spec.ts";

const dockerfile = await Deno.readTextFile(new URL("../../deploy/Dockerfile", import.meta.url));
/** The instructions, continuation lines joined. */
const instructions = dockerfile.replace(/\\\n/g, " ").split("\n").map((l) => l.trim())
  .filter((l) => l && !l.startsWith("#"));
const args = (keyword: string) =>
  instructions.filter((l) => l.startsWith(`${keyword} `)).map((l) => l.slice(keyword.length + 1));

Deno.test("the Dockerfile installs exactly the image spec's Debian packages", () => {
  const run = args("RUN").join(" ");
  const installed = /apt-get install -y --no-install-recommends ([^&]+)/.exec(run)![1].trim()
    .split(/\s+/);
  assertEquals(installed.sort(), [...IMAGE_PACKAGES].sort());
});

Deno.test("the Dockerfile removes exactly what the image spec prunes, after installing", () => {
  const run = args("RUN")[0];
  const removed = /&& rm -rf ([^&]+)$/.exec(run)![1].trim().split(/\s+/);
  assertEquals(removed, IMAGE_PRUNE);
});

Deno.test("the Dockerfile copies the spec's sources into its working directory", () => {
  assertEquals(args("WORKDIR"), [IMAGE_WORKDIR]);
  const copied = args("COPY").flatMap((a) => a.split(/\s+/).slice(0, -1));
  assertEquals(copied.sort(), [...IMAGE_SOURCES].sort());
});

Deno.test("the Dockerfile caches the same modules and bundles the shim where the spec says", () => {
  const run = args("RUN").join(" ");
  assertEquals(/deno cache --frozen ([^&]+)/.exec(run)![1].trim().split(/\s+/), IMAGE_CACHED);
  assertEquals(/deno bundle .* -o (\S+)/.exec(run)![1], IMAGE_SHIM_BUNDLE);
});

Deno.test("the Dockerfile's environment, entrypoint and arguments are the spec's", () => {
  const env = Object.fromEntries(
    args("ENV").flatMap((a) => a.split(/\s+/)).map((kv) => kv.split("=") as [string, string]),
  );
  assertEquals(env, IMAGE_ENV);
  assertEquals(JSON.parse(args("ENTRYPOINT")[0]), IMAGE_ENTRYPOINT);
  assertEquals(JSON.parse(args("CMD")[0]), IMAGE_CMD);
});
