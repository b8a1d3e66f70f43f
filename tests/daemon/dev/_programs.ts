/**
 * Finds the external programs a body of TypeScript source starts, by reading it (pure: text in,
 * names out), for the test that `deno task setup` installs them all. What the scan understands:
 *
 * - `new Deno.Command("PROG", …)`;
 * - calls of the spawn helpers the sources define, found by their definitions: a function whose
 *   `Deno.Command(x, …)` takes its program from a parameter `x` (`run("PROG", …)`), or from the
 *   first element of an argv parameter `x[0]` (`sh(["PROG", …])`);
 * - a command run in a namespace, `"netns", "exec", NS, "PROG"` in any array or argument list, and
 *   calls of the helpers that put an argv parameter there (`"netns", "exec", NS, ...argv`):
 *   `inNs(ns, ["PROG", …])`;
 * - a program and its arguments as a pair, `["PROG", [ … ]]`, and an option's default named for
 *   it, `options.nft ?? "nft"`;
 * - shell scripts: the script of `"sh"`/`"/bin/sh"`/`"bash"` `"-c"` (a string, or a variable
 *   assigned from string literals) and any string that starts with `#!/bin/sh`: every word in a
 *   command's place (after `;`, `|`, `&&`, a newline, `$(`, `do`, `then`, …, past `VAR=value`,
 *   `exec`, `timeout N` and `ip netns exec NS`), shell keywords and builtins left out.
 *
 * Comments are skipped. What it cannot read (a program in a variable given to a helper) it does
 * not report; {@link unresolvedSpawns} names each `Deno.Command` whose program is neither a
 * literal nor a helper's parameter, so the test can account for every one.
 *
 * @module
 */

/** A token of TypeScript source: a string literal (its text, quotes off), a word or a mark. */
export interface Token {
  kind: "str" | "word" | "mark";
  text: string;
}

const WORD = /[A-Za-z0-9_$#]/;

/** Skips a template literal starting at `s[i] === "`"`; returns the index after its end. */
function skipTemplate(s: string, i: number): number {
  i++;
  while (i < s.length && s[i] !== "`") {
    if (s[i] === "\\") i += 2;
    else if (s[i] === "$" && s[i + 1] === "{") i = skipCode(s, i + 2);
    else i++;
  }
  return i + 1;
}

/** Skips code inside `${…}` up to its closing brace; returns the index after it. */
function skipCode(s: string, i: number): number {
  let depth = 1;
  while (i < s.length && depth > 0) {
    const c = s[i];
    if (c === "`") i = skipTemplate(s, i);
    else if (c === '"' || c === "'") i = skipQuoted(s, i);
    else {
      if (c === "{") depth++;
      if (c === "}") depth--;
      i++;
    }
  }
  return i;
}

function skipQuoted(s: string, i: number): number {
  const q = s[i++];
  while (i < s.length && s[i] !== q && s[i] !== "\n") i += s[i] === "\\" ? 2 : 1;
  return i + 1;
}

/** Decodes the simple escapes of a string literal's body (enough for program names and scripts). */
function unescape(body: string): string {
  return body.replace(
    /\\(.)/g,
    (_, c: string) => ({ n: "\n", t: "\t" } as Record<string, string>)[c] ?? c,
  );
}

/**
 * Splits TypeScript source into tokens, comments dropped. A template literal is one string token
 * whose `${…}` parts read `${}`; a regular expression literal is dropped.
 */
export function tokenize(s: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  const regexMayStart = () => {
    const last = out.at(-1);
    if (!last) return true;
    if (last.kind === "mark") return !")]}".includes(last.text);
    return last.kind === "word" && ["return", "typeof", "case", "of", "in"].includes(last.text);
  };
  while (i < s.length) {
    const c = s[i];
    if (/\s/.test(c)) i++;
    else if (c === "/" && s[i + 1] === "/") { while (i < s.length && s[i] !== "\n") i++; }
    else if (c === "/" && s[i + 1] === "*") {
      i = s.indexOf("*/", i + 2) < 0 ? s.length : s.indexOf("*/", i + 2) + 2;
    } else if (c === '"' || c === "'") {
      const end = skipQuoted(s, i);
      out.push({ kind: "str", text: unescape(s.slice(i + 1, end - 1)) });
      i = end;
    } else if (c === "`") {
      const end = skipTemplate(s, i);
      let text = "", j = i + 1;
      while (j < end - 1) {
        if (s[j] === "$" && s[j + 1] === "{") {
          const close = skipCode(s, j + 2);
          text += "${}";
          j = close;
        } else if (s[j] === "\\") {
          text += unescape(s.slice(j, j + 2));
          j += 2;
        } else text += s[j++];
      }
      out.push({ kind: "str", text });
      i = end;
    } else if (c === "/" && regexMayStart()) {
      let inClass = false;
      i++;
      while (i < s.length && s[i] !== "\n" && (inClass || s[i] !== "/")) {
        if (s[i] === "\\") i++;
        else if (s[i] === "[") inClass = true;
        else if (s[i] === "]") inClass = false;
        i++;
      }
      i++;
      while (i < s.length && /[a-z]/.test(s[i])) i++;
    } else if (WORD.test(c)) {
      let j = i;
      while (j < s.length && WORD.test(s[j])) j++;
      out.push({ kind: "word", text: s.slice(i, j) });
      i = j;
    } else if (c === "." && s.startsWith("...", i)) {
      out.push({ kind: "mark", text: "..." });
      i += 3;
    } else if (c === "?" && s[i + 1] === "?") {
      out.push({ kind: "mark", text: "??" });
      i += 2;
    } else {
      out.push({ kind: "mark", text: c });
      i++;
    }
  }
  return out;
}

/** Shell words that are keywords or builtins, never programs to install. */
const SHELL_OWN = new Set([
  "if",
  "then",
  "else",
  "elif",
  "fi",
  "for",
  "in",
  "do",
  "done",
  "while",
  "until",
  "case",
  "esac",
  "function",
  "echo",
  "printf",
  "read",
  "exit",
  "return",
  "true",
  "false",
  "set",
  "unset",
  "export",
  "trap",
  "wait",
  "kill",
  "cd",
  "test",
  "[",
  "[[",
  ":",
  ".",
  "eval",
  "shift",
  "local",
  "command",
  "break",
  "continue",
  "umask",
  "ulimit",
  "exec",
  "!",
  "{",
  "}",
  "(",
  ")",
]);

/** The programs a shell script starts (see the module's doc). */
export function shellPrograms(script: string): string[] {
  const found: string[] = [];
  const text = script.replace(/\$\{\}/g, "$_").replace(/'[^']*'/g, "''");
  // Each piece starts in a command's place.
  for (const piece of text.split(/\n|;|\|\||&&|\||&|\$\(|`|\(|\bthen\b|\bdo\b|\belse\b/)) {
    const words = piece.trim().split(/\s+/).filter((w) => w !== "");
    let k = 0;
    for (;;) {
      const w = words[k];
      if (w === undefined) break;
      if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(w) || w === "exec" || w === "!" || w === "{") k++;
      else if (w === "timeout") k += 2;
      else if (w === "ip" && words[k + 1] === "netns" && words[k + 2] === "exec") {
        found.push("ip");
        k += 4;
      } else break;
    }
    const prog = words[k];
    if (prog && /^[A-Za-z0-9_./+-]+$/.test(prog) && !SHELL_OWN.has(prog) && !/^[0-9-]/.test(prog)) {
      found.push(prog);
    }
  }
  return found;
}

/**
 * A spawn helper: calls of `name` start the program given as argument `arg`, or its argv's first
 * (`argv`). It is defined in `file`, and counts in that file and in the files that import it.
 */
export interface Helper {
  name: string;
  arg: number;
  argv: boolean;
  file: string;
}

/** A source file: its path (any form, used to match imports) and text. */
export interface Source {
  path: string;
  text: string;
}

/** Index of the token closing the bracket opened at `open`. */
function closing(t: Token[], open: number): number {
  let depth = 0;
  for (let i = open; i < t.length; i++) {
    if (t[i].kind !== "mark") continue;
    if ("([{".includes(t[i].text)) depth++;
    if (")]}".includes(t[i].text) && --depth === 0) return i;
  }
  return t.length;
}

/** The top-level arguments of the list opened at `open` (a `(` or `[`), as token index ranges. */
function argumentsAt(t: Token[], open: number): [number, number][] {
  const end = closing(t, open), out: [number, number][] = [];
  let from = open + 1, depth = 0;
  for (let i = open + 1; i < end; i++) {
    const m = t[i].kind === "mark" ? t[i].text : "";
    if ("([{".includes(m) && m) depth++;
    else if (")]}".includes(m) && m) depth--;
    else if (m === "," && depth === 0) {
      out.push([from, i]);
      from = i + 1;
    }
  }
  if (from < end) out.push([from, end]);
  return out;
}

/**
 * The function whose parameter list holds `param`, nearest before token `at`: its name and the
 * parameter's position, or undefined.
 */
function enclosingParam(
  t: Token[],
  at: number,
  param: string,
): { name: string; arg: number } | undefined {
  for (let i = at - 1; i > 0; i--) {
    if (t[i].text !== "(" || t[i].kind !== "mark") continue;
    const args = argumentsAt(t, i);
    const arg = args.findIndex(([a]) =>
      t[a].text === param || (t[a].text === "..." && t[a + 1]?.text === param)
    );
    if (arg < 0) continue;
    const [a] = args[arg];
    const next = t[a].text === "..." ? t[a + 2] : t[a + 1];
    if (!next || ![":", ",", ")", "="].includes(next.text)) continue;
    // A declaration's parameters: `) {`, `): Type {` or `) =>`, never a call's arguments.
    const after = t[closing(t, i) + 1]?.text;
    if (after !== "{" && after !== ":" && after !== "=") continue;
    let k = i - 1;
    if (t[k]?.text === "async") k--;
    if (t[k]?.text === "=") k--;
    if (
      t[k]?.kind === "word" &&
      !["function", "if", "while", "for", "switch", "catch"].includes(t[k].text)
    ) {
      return { name: t[k].text, arg };
    }
  }
  return undefined;
}

/** True when tokens from `i` read `Deno . Command (`. */
const isCommandAt = (t: Token[], i: number) =>
  t[i].text === "Deno" && t[i + 1]?.text === "." && t[i + 2]?.text === "Command" &&
  t[i + 3]?.text === "(";

/** The spawn helpers `sources` define (see the module's doc). */
export function findHelpers(sources: Source[]): Helper[] {
  const helpers: Helper[] = [];
  for (const { path: file, text } of sources) {
    const t = tokenize(text);
    for (let i = 0; i < t.length; i++) {
      if (isCommandAt(t, i) && t[i + 4]?.kind === "word" && t[i + 4].text !== "Deno") {
        const param = t[i + 4].text, argv = t[i + 5]?.text === "[";
        const found = enclosingParam(t, i, param);
        if (found) helpers.push({ ...found, argv, file });
      }
      // `"netns", "exec", NS, ...argv` inside a function with an `argv` parameter.
      if (t[i].kind === "str" && t[i].text === "netns" && t[i + 2]?.text === "exec") {
        let k = i + 4;
        while (k < t.length && t[k].text !== "," && t[k].text !== "]" && t[k].text !== ")") k++;
        if (t[k]?.text === "," && t[k + 1]?.text === "..." && t[k + 2]?.kind === "word") {
          const found = enclosingParam(t, i, t[k + 2].text);
          if (found) helpers.push({ ...found, argv: true, file });
        }
      }
    }
  }
  return helpers;
}

/** The strings assigned to `name` in `t` (`const name = [ "…", … ].join(…)` or a string). */
function assignedStrings(t: Token[], name: string): string[] {
  for (let i = 0; i + 2 < t.length; i++) {
    if (t[i].text !== name || t[i + 1].text !== "=" || t[i - 1]?.text === ".") continue;
    const out: string[] = [];
    for (let k = i + 2; k < t.length && t[k].text !== ";"; k++) {
      if (t[k].kind === "str") out.push(t[k].text);
      if (t[k].kind === "mark" && "[(".includes(t[k].text)) k = closingCollect(t, k, out);
    }
    return [out.join("\n")];
  }
  return [];
}

function closingCollect(t: Token[], open: number, out: string[]): number {
  const end = closing(t, open);
  for (let k = open + 1; k < end; k++) if (t[k].kind === "str") out.push(t[k].text);
  return end;
}

/**
 * The programs `source` starts, given the spawn helpers of every scanned source and the paths of
 * the files `source` imports (a helper counts in its own file and in those that import it).
 */
export function programsIn(source: Source, helpers: Helper[], imports: string[]): string[] {
  const t = tokenize(source.text), found: string[] = [];
  const byName = new Map<string, Helper[]>();
  const visible = new Set([source.path, ...imports]);
  for (const h of helpers) {
    // A function of the file's own shadows an imported helper of the same name.
    const shadowed = h.file !== source.path &&
      new RegExp(`\\b(function\\s+${h.name}\\s*\\(|(const|let)\\s+${h.name}\\s*=)`).test(
        source.text,
      );
    if (visible.has(h.file) && !shadowed) byName.set(h.name, [...(byName.get(h.name) ?? []), h]);
  }
  const firstString = (range: [number, number] | undefined, argv: boolean) => {
    if (!range) return undefined;
    const [a] = range;
    if (!argv) return t[a].kind === "str" && range[1] === a + 1 ? t[a].text : undefined;
    return t[a].text === "[" && t[a + 1]?.kind === "str" ? t[a + 1].text : undefined;
  };
  for (let i = 0; i < t.length; i++) {
    const tok = t[i];
    if (isCommandAt(t, i) && t[i + 4]?.kind === "str") found.push(t[i + 4].text);
    if (tok.kind === "word" && t[i + 1]?.text === "(" && t[i - 1]?.text !== "function") {
      for (const h of byName.get(tok.text) ?? []) {
        const p = firstString(argumentsAt(t, i + 1)[h.arg], h.argv);
        if (p) found.push(p);
      }
    }
    if (tok.kind === "str" && tok.text === "netns" && t[i + 2]?.text === "exec") {
      let k = i + 4;
      let depth = 0;
      while (k < t.length && !(depth === 0 && [",", "]", ")"].includes(t[k].text))) {
        if ("([{".includes(t[k].text) && t[k].kind === "mark") depth++;
        if (")]}".includes(t[k].text) && t[k].kind === "mark") depth--;
        k++;
      }
      if (t[k]?.text === "," && t[k + 1]?.kind === "str") found.push(t[k + 1].text);
    }
    if (
      (t[i - 1]?.text === "?" || t[i - 1]?.text === ":") && tok.text === "[" &&
      t[i + 1]?.kind === "str" && t[i + 2]?.text === "," && t[i + 3]?.text === "["
    ) {
      found.push(t[i + 1].text);
    }
    if (tok.text === "??" && t[i + 1]?.kind === "str" && t[i - 1]?.text === t[i + 1].text) {
      found.push(t[i + 1].text);
    }
    const isShell = tok.kind === "str" && ["sh", "/bin/sh", "bash", "/bin/bash"].includes(tok.text);
    const c = t[i + 2]?.text === "-c" ? i + 2 : t[i + 2]?.text === "[" ? i + 3 : -1;
    if (
      isShell && t[i + 1]?.text === "," && c > 0 && t[c]?.text === "-c" && t[c + 1]?.text === ","
    ) {
      const script = t[c + 2];
      const texts = script?.kind === "str"
        ? [script.text]
        : script?.kind === "word"
        ? assignedStrings(t, script.text)
        : [];
      for (const s of texts) found.push(...shellPrograms(s));
    }
    if (tok.kind === "str" && tok.text.startsWith("#!/bin/sh\n")) {
      found.push(...shellPrograms(tok.text.slice("#!/bin/sh\n".length)));
    }
  }
  // A program given by a computed path (`${dir}/start.sh`) is not a name to install.
  return found.filter((p) => !p.includes("${}"));
}

/**
 * Each `Deno.Command` of `source` whose program is neither a string literal nor a parameter of the
 * function around it: its text (`Deno.Command(GDB!`), for the test to account for.
 */
export function unresolvedSpawns(source: string): string[] {
  const t = tokenize(source), out: string[] = [];
  for (let i = 0; i < t.length; i++) {
    if (!isCommandAt(t, i) || t[i + 4]?.kind === "str") continue;
    const w = t[i + 4];
    if (w?.kind === "word" && w.text !== "Deno" && enclosingParam(t, i, w.text)) continue;
    out.push(t.slice(i, i + 8).map((x) => x.text).join(""));
  }
  return out;
}
