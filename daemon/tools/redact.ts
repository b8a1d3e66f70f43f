/**
 * Redaction by key, for every part of `kubectl ferry sysdump` (pure): the node's files (its
 * config, attachment records with their NAD configs, allocations), the daemon's log and the API's
 * objects all go through {@link redactText} or {@link redact} before they reach the archive.
 *
 * A key is secret when, in any case and with `_`, `-` and `.` left out, it holds `password`,
 * `passwd`, `passphrase`, `secret`, `token`, `credential`, `private`, `auth` (`authorization`,
 * `basic_auth`), `username` or `keyfile`/`keydata`, or ends in `key` (`apiKey`, `api_key`,
 * `privateKey`, `access_key`, `key`): whereabouts' `etcd_password`, `etcd_username` (half of a
 * credential, and never needed to diagnose a network) and `etcd_key_file` are all redacted. Its
 * value becomes `"<redacted>"` at any depth, and so does the `value` of a `{ name, value }` pair
 * with a secret name (an environment variable). Strings are read too: one that holds JSON (a
 * NAD's `spec.config`, a record's config, a log line's message) is redacted inside and written
 * back; a `config` string that is not JSON is redacted whole (it cannot be read key by key); any
 * other string has `key: value`, `key=value` and `"key":"value"` of a secret key and PEM private
 * keys blanked. Values nested deeper than {@link MAX_REDACT_DEPTH} are redacted whole.
 *
 * @module
 */

/** What a redacted value becomes. */
export const REDACTED = "<redacted>";

/** Nesting past which a value is redacted whole rather than walked. */
export const MAX_REDACT_DEPTH = 100;

const SECRET_PART =
  /password|passwd|passphrase|secret|token|credential|private|auth|username|keyfile|keydata/;

/**
 * Whether a key names a secret (see the module's doc).
 *
 * @example
 * ```ts
 * isSecretKey("etcd_password"); // true
 * isSecretKey("apiKey"); // true
 * isSecretKey("master"); // false
 * ```
 */
export function isSecretKey(key: string): boolean {
  const k = key.toLowerCase().replace(/[-_.]/g, "");
  return SECRET_PART.test(k) || k.endsWith("key");
}

/** A secret key as it may appear in free text, quoted or not, then `:` or `=` and its value. */
const IN_TEXT =
  /(\\?")?([A-Za-z0-9_.-]+)(\\?")?(\s*[:=]\s*)(\\"(?:[^"\\]|\\\\)*?\\"|"(?:[^"\\]|\\.)*"|[^\s,;}&\]"\\]+)/g;

/** PEM blocks of private keys. */
const PEM_PRIVATE =
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)/g;

/**
 * Free text with the values of secret keys (`etcd_password: x`, `token=x`, `"apiKey":"x"`, also
 * inside escaped JSON) and PEM private keys replaced by {@link REDACTED}.
 *
 * @example
 * ```ts
 * scrubText('refused: {"etcd_password":"hunter2"}'); // 'refused: {"etcd_password":"<redacted>"}'
 * ```
 */
export function scrubText(text: string): string {
  return text.replace(PEM_PRIVATE, REDACTED).replace(
    IN_TEXT,
    (all, q1 = "", key: string, q2 = "", sep: string, value: string) => {
      if (!isSecretKey(key)) return all;
      const quoted = value.startsWith('\\"') ? '\\"' : value.startsWith('"') ? '"' : "";
      return `${q1}${key}${q2}${sep}${quoted}${REDACTED}${quoted}`;
    },
  );
}

/** A string that holds a JSON object or array, parsed; undefined otherwise. */
function asJson(s: string): unknown {
  const t = s.trim();
  if (!(t.startsWith("{") && t.endsWith("}")) && !(t.startsWith("[") && t.endsWith("]"))) {
    return undefined;
  }
  try {
    return JSON.parse(t);
  } catch {
    return undefined;
  }
}

function redactString(s: string, key: string | undefined, depth: number): string {
  const inner = asJson(s);
  if (inner !== undefined) return JSON.stringify(redact(inner, depth + 1));
  if (key !== undefined && key.toLowerCase() === "config" && /[{[]/.test(s)) return REDACTED;
  return scrubText(s);
}

/**
 * `value` with the values of secret keys replaced by {@link REDACTED} at any depth, inside JSON
 * strings too (see the module's doc).
 *
 * @example
 * ```ts
 * redact({ apiToken: "abc", port: 1 }); // { apiToken: "<redacted>", port: 1 }
 * redact({ spec: { config: '{"apiKey":"k","type":"x"}' } });
 * // { spec: { config: '{"apiKey":"<redacted>","type":"x"}' } }
 * ```
 */
export function redact(value: unknown, depth = 0): unknown {
  return walk(value, undefined, depth);
}

function walk(value: unknown, key: string | undefined, depth: number): unknown {
  if (depth > MAX_REDACT_DEPTH) return REDACTED;
  if (typeof value === "string") return redactString(value, key, depth);
  if (Array.isArray(value)) return value.map((v) => walk(v, undefined, depth + 1));
  if (value && typeof value === "object") {
    const named = (value as { name?: unknown }).name;
    const secretPair = typeof named === "string" && isSecretKey(named) && "value" in value;
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [
        k,
        isSecretKey(k) || (secretPair && k === "value") ? REDACTED : walk(v, k, depth + 1),
      ]),
    );
  }
  return value;
}

/**
 * A file's text redacted: JSON (pretty-printed again), JSON lines (a log: each line compact
 * again), or free text ({@link scrubText}, line by line for lines that are not JSON).
 *
 * @example
 * ```ts
 * redactText('{"conf":{"ipam":{"etcd_password":"p"}}}');
 * // '{\n  "conf": {\n    "ipam": {\n      "etcd_password": "<redacted>"\n    }\n  }\n}\n'
 * ```
 */
export function redactText(text: string): string {
  const whole = asJson(text);
  if (whole !== undefined) return JSON.stringify(redact(whole), null, 2) + "\n";
  return text.replace(PEM_PRIVATE, REDACTED).split("\n").map((line) => {
    const v = asJson(line);
    return v === undefined ? scrubText(line) : JSON.stringify(redact(v));
  }).join("\n");
}
