import { z } from 'zod';
import { InvalidRequestError, UnsupportedError } from '../core/errors.js';

/**
 * Parse a request body (or query) against its schema once, at the boundary.
 * The first issue becomes a 400 whose `param` is the dotted field path, so a
 * client sees exactly which field was wrong.
 */
export function parseRequest<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  // No body, or one the JSON parser skipped (text/plain, XML): say so, rather than "expected object, received undefined".
  if (input === undefined) {
    throw new InvalidRequestError('The request body is missing or is not JSON: send a JSON object with Content-Type: application/json.', { code: 'invalid_json' });
  }
  // reportInput keeps each issue's input, so a present value of the wrong type is not mistaken for a missing one.
  const result = schema.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = issue.path.length > 0 ? issue.path.map(String).join('.') : null;
  const where = param ? `'${param}'` : 'request body';
  // A schema's own check may name a more precise code (`params: { code }` on a custom issue).
  const own = issue.code === 'custom' && typeof issue.params?.code === 'string' ? (issue.params.code as string) : undefined;
  throw new InvalidRequestError(`Invalid ${where}: ${issue.message}`, {
    param,
    code: own ?? (issue.code === 'invalid_type' && issue.input === undefined ? 'missing_required_parameter' : 'invalid_value'),
  });
}

/**
 * parseRequest for an object schema whose unknown fields are errors too: a
 * typo or a feature we lack is a 400 naming the field (code
 * unsupported_parameter), never silently ignored. Fields clients send
 * routinely belong in the schema, accepted and unused.
 */
export function parseKnownFields<S extends z.ZodObject>(schema: S, input: unknown): z.output<S> {
  const parsed = parseRequest(schema, input);
  const known = new Set(Object.keys(schema.shape));
  for (const key of Object.keys(input as object)) {
    if (!known.has(key)) throw new UnsupportedError(`Unsupported parameter '${key}'.`, { param: key });
  }
  return parsed;
}

/**
 * The deepest nesting of arrays and objects a JSON body may have. Handlers,
 * zod and engine code (a tool's JSON schema turned into a grammar) walk
 * bodies recursively, so a hostile 100 000-level body would overflow the
 * stack and answer 500. Legitimate bodies stay far below this: a JSON schema
 * in `response_format` or `tools` costs two levels per nested property.
 */
export const MAX_JSON_DEPTH = 128;

/** Throws a 400 (code too_deeply_nested) when `value` nests deeper than `limit`; iterative, so it cannot overflow itself. */
export function assertJsonDepth(value: unknown, limit = MAX_JSON_DEPTH): void {
  const pending: Array<{ node: object; depth: number }> = [];
  if (value !== null && typeof value === 'object') pending.push({ node: value, depth: 1 });
  for (let item = pending.pop(); item; item = pending.pop()) {
    if (item.depth > limit) {
      throw new InvalidRequestError(`The request body is nested more than ${limit} levels deep.`, { code: 'too_deeply_nested' });
    }
    for (const child of Object.values(item.node)) {
      if (child !== null && typeof child === 'object') pending.push({ node: child as object, depth: item.depth + 1 });
    }
  }
}

/**
 * Throws (when the module loads) unless `schema` and `fields` name the same
 * fields: each API keeps the list of its reference's fields and what is done
 * with each (src/api/anthropic/fields.ts, src/api/responses/fields.ts) beside
 * its schema, and neither may drift from the other.
 */
export function assertFieldsListed(schema: z.ZodObject, fields: Record<string, unknown>, api: string): void {
  const inSchema = Object.keys(schema.shape).sort().join(',');
  const listed = Object.keys(fields).sort().join(',');
  if (inSchema !== listed) throw new Error(`the ${api} schema and its field list differ: ${inSchema} vs ${listed}`);
}
