import { assertEquals } from "deno-std/assert/mod.js";
import { jsonLine, renderMessage, textLine } from "../../../daemon/telemetry/log.ts";

Deno.test("log messages read as sentences: strings bare, other values as JSON", () => {
  assertEquals(
    renderMessage(["released ", "f535", "/", "eth0", " (", ["10.0.0.2"], ") in ", 3.5, " ms"]),
    'released f535/eth0 (["10.0.0.2"]) in 3.5 ms',
  );
  assertEquals(renderMessage(["failed: ", new Error("boom"), ""]), "failed: boom");
  const line = JSON.parse(jsonLine({
    category: ["ferry", "cni"],
    level: "warning",
    message: ["pod ", "default/web-0", " failed"],
    rawMessage: "pod {pod} failed",
    properties: { pod: "default/web-0", n: 10n },
    timestamp: 0,
  }));
  assertEquals(line, {
    "@timestamp": "1970-01-01T00:00:00.000Z",
    level: "WARNING",
    message: "pod default/web-0 failed",
    logger: "ferry.cni",
    properties: { pod: "default/web-0", n: "10" },
  });
});

Deno.test("text lines read as time, level, logger and the sentence", () => {
  assertEquals(
    textLine({
      category: ["ferry", "daemon"],
      level: "info",
      message: ["serving on ", "/run/ferry/ferry.sock", " for node ", "rc-node1", ""],
      rawMessage: "serving on {socket} for node {node}",
      properties: { socket: "/run/ferry/ferry.sock", node: "rc-node1" },
      timestamp: 0,
    }),
    "1970-01-01T00:00:00.000Z INFO  ferry.daemon: serving on /run/ferry/ferry.sock for node rc-node1\n",
  );
});
