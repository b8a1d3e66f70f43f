/**
 * `deno task image [--out FILE] [--name NAME] [--mirror URL]` (as root): builds Ferry's node
 * image on this machine without any registry, as an OCI image archive that `ctr images import`
 * (or `docker load`, `podman load`) takes: a Debian root filesystem made by
 * `debootstrap --variant=minbase` with the packages of `deploy/image_spec.ts`, this Deno, Ferry's
 * code, its dependency cache (nothing is fetched at run time) and the shim bundled for the
 * install step. One uncompressed layer, files owned by root, timestamps zeroed. Prints the size
 * and what takes it. `deploy/Dockerfile` is the same recipe for builders with a registry.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { bundleShim } from "../cni/install.ts";
import {
  DEBIAN_SUITE,
  IMAGE_CACHED,
  IMAGE_CMD,
  IMAGE_DENO,
  IMAGE_ENTRYPOINT,
  IMAGE_ENV,
  IMAGE_PACKAGES,
  IMAGE_PRUNE,
  IMAGE_SHIM_BUNDLE,
  IMAGE_SOURCES,
  IMAGE_WORKDIR,
} from "./image_spec.ts";

const REPO = new URL("../", import.meta.url).pathname;

async function run(
  cmd: string,
  args: string[],
  options: Deno.CommandOptions = {},
): Promise<string> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped", ...options })
    .output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${cmd} ${args.join(" ")} failed:\n${text.slice(-4000)}`);
  return text;
}

/** The OCI descriptor fields of `bytes`: its sha256 digest and size. */
async function describe(bytes: Uint8Array): Promise<{ digest: string; size: number }> {
  const hash = new Uint8Array(
    await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>),
  );
  const hex = Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
  return { digest: `sha256:${hex}`, size: bytes.length };
}

async function writeBlob(
  layout: string,
  bytes: Uint8Array,
): Promise<{ digest: string; size: number }> {
  const d = await describe(bytes);
  await Deno.writeFile(`${layout}/blobs/sha256/${d.digest.slice(7)}`, bytes);
  return d;
}

/** Makes the root filesystem in `root`. */
export async function buildRootfs(root: string, mirror: string, log: (s: string) => void) {
  log(`debootstrap ${DEBIAN_SUITE} (minbase) with ${IMAGE_PACKAGES.join(", ")}`);
  await run("debootstrap", [
    "--variant=minbase",
    `--include=${IMAGE_PACKAGES.join(",")}`,
    DEBIAN_SUITE,
    root,
    mirror,
  ]);
  // Not needed at run time (IMAGE_PRUNE): the package manager, Perl, caches, documentation.
  await run("sh", ["-c", `cd '${root}' && rm -rf ${IMAGE_PRUNE.map((p) => `.${p}`).join(" ")}`]);
  log(`Deno ${Deno.version.deno} → ${IMAGE_DENO}`);
  await Deno.copyFile(Deno.execPath(), `${root}${IMAGE_DENO}`);
  await Deno.chmod(`${root}${IMAGE_DENO}`, 0o755);
  const work = `${root}${IMAGE_WORKDIR}`;
  await Deno.mkdir(work, { recursive: true });
  for (const source of IMAGE_SOURCES) {
    await run("cp", ["-a", `${REPO}${source}`, `${work}/`]);
  }
  log(`dependency cache → ${IMAGE_ENV.DENO_DIR}`);
  await run(Deno.execPath(), ["cache", "--frozen", ...IMAGE_CACHED], {
    cwd: work,
    env: { DENO_DIR: `${root}${IMAGE_ENV.DENO_DIR}`, DENO_NO_UPDATE_CHECK: "1" },
  });
  log(`shim bundle → ${IMAGE_SHIM_BUNDLE}`);
  await Deno.mkdir(`${root}${IMAGE_SHIM_BUNDLE.slice(0, IMAGE_SHIM_BUNDLE.lastIndexOf("/"))}`, {
    recursive: true,
  });
  await bundleShim(Deno.execPath(), `${root}${IMAGE_SHIM_BUNDLE}`);
}

/** Packs `root` as an OCI image layout archive named `name` into `out`. */
export async function packOci(root: string, name: string, out: string, tmp: string) {
  const layout = `${tmp}/layout`;
  await Deno.mkdir(`${layout}/blobs/sha256`, { recursive: true });
  const layerTar = `${tmp}/layer.tar`;
  await run("tar", [
    "--sort=name",
    "--mtime=@0",
    "--owner=0",
    "--group=0",
    "--numeric-owner",
    "--xattrs",
    "-C",
    root,
    "-cf",
    layerTar,
    ".",
  ]);
  const layer = await describe(await Deno.readFile(layerTar));
  await Deno.rename(layerTar, `${layout}/blobs/sha256/${layer.digest.slice(7)}`);
  const json = (x: unknown) => new TextEncoder().encode(JSON.stringify(x));
  const config = await writeBlob(
    layout,
    json({
      architecture: "amd64",
      os: "linux",
      config: {
        Env: [
          "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          ...Object.entries(IMAGE_ENV).map(([k, v]) => `${k}=${v}`),
        ],
        Entrypoint: IMAGE_ENTRYPOINT,
        Cmd: IMAGE_CMD,
        WorkingDir: IMAGE_WORKDIR,
        User: "root",
      },
      rootfs: { type: "layers", diff_ids: [layer.digest] },
    }),
  );
  const manifest = await writeBlob(
    layout,
    json({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", ...layer }],
    }),
  );
  await Deno.writeTextFile(`${layout}/oci-layout`, JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await Deno.writeTextFile(
    `${layout}/index.json`,
    JSON.stringify({
      schemaVersion: 2,
      manifests: [{
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        ...manifest,
        annotations: {
          "io.containerd.image.name": name,
          "org.opencontainers.image.ref.name": name.slice(name.lastIndexOf(":") + 1),
        },
      }],
    }),
  );
  await run("tar", [
    "--sort=name",
    "--mtime=@0",
    "--owner=0",
    "--group=0",
    "-C",
    layout,
    "-cf",
    out,
    ".",
  ]);
  return { layer: layer.size };
}

if (import.meta.main) {
  if (Deno.uid() !== 0) {
    console.error("the image is built as root (debootstrap)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, {
    string: ["out", "name", "mirror"],
    default: {
      out: `${REPO}deploy/out/ferry-image.tar`,
      name: "localhost/ferry:dev",
      mirror: "http://deb.debian.org/debian",
    },
  });
  const tmp = await Deno.makeTempDir({ prefix: "ferry-image-" });
  const started = performance.now();
  try {
    const root = `${tmp}/rootfs`;
    await buildRootfs(root, flags.mirror, console.log);
    await Deno.mkdir(flags.out.slice(0, flags.out.lastIndexOf("/")) || ".", { recursive: true });
    const { layer } = await packOci(root, flags.name, flags.out, tmp);
    const sizes = await run("du", [
      "-xsm",
      ...[
        "usr/bin/deno",
        `opt/ferry/.deno`,
        "opt/ferry",
        "usr/lib/cni",
        "usr/lib",
        "usr/share",
        "var",
        "etc",
      ].map((p) => `${root}/${p}`),
    ]);
    console.log(
      `wrote ${flags.out} (${flags.name}): ${(layer / 1048576).toFixed(0)} MB in one layer, ` +
        `${((performance.now() - started) / 1000).toFixed(0)} s; MB by place (each line leaves ` +
        "out what a line above counted):\n" +
        sizes.trim().split("\n").map((l) => "  " + l.replace(`${root}/`, "/")).join("\n"),
    );
  } finally {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}
