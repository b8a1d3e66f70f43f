/**
 * The stand-in's JSON answers: an object, and a `Status` failure as the real server writes it.
 *
 * @module
 */

/** A JSON answer. */
export function answer(body: unknown, code = 200): Response {
  return new Response(JSON.stringify(body), {
    status: code,
    headers: { "content-type": "application/json" },
  });
}

/** A `Status` failure with its HTTP code and reason. */
export function status(code: number, reason: string, message: string): Response {
  return answer({
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
  }, code);
}
