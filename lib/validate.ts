/**
 * Applies a generated validator and turns its failure into a {@link CniError}. Imports nothing
 * heavy, so the shim can use it.
 *
 * @module
 */
import { CniError } from "./cni/errors.ts";

/** One error as ajv reports it. */
export interface ValidationIssue {
  /** JSON pointer of the offending value. */
  instancePath: string;
  /** What was wrong. */
  message?: string;
  /** Keyword parameters, e.g. the missing property. */
  params?: Record<string, unknown>;
}

/** An ajv validate function (generated ahead of time or compiled). */
export interface ValidateFunction {
  /** True when `data` matches the schema. */
  (data: unknown): boolean;
  /** The issues of the last failed call. */
  errors?: ValidationIssue[] | null;
}

/** Formats validation issues as one line, e.g. `/ipam/type: must be string`. */
export function describeIssues(issues: ValidationIssue[] | null | undefined): string {
  if (!issues || issues.length === 0) return "does not match its schema";
  return issues.map((i) => `${i.instancePath || "/"}: ${i.message ?? "is invalid"}`).join("; ");
}

/**
 * Returns `data` typed as `T` when `validate` accepts it.
 *
 * @throws {CniError} with `code` and `what` in the message otherwise.
 * @example
 * ```ts
 * const conf = checkShape<NetConf>(validateNetConf, input, 7, "network config");
 * ```
 */
export function checkShape<T>(
  validate: ValidateFunction,
  data: unknown,
  code: number,
  what: string,
): T {
  if (validate(data)) return data as T;
  throw new CniError(code, `invalid ${what}`, describeIssues(validate.errors));
}
