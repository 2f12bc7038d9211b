import { z } from 'zod';
import { InvalidRequestError, UnsupportedError } from '../core/errors.js';

/**
 * Parse a request body (or query) against its schema once, at the boundary.
 * The first issue becomes a 400 whose `param` is the dotted field path, so a
 * client sees exactly which field was wrong.
 */
export function parseRequest<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  // reportInput keeps each issue's input, so a present value of the wrong type is not mistaken for a missing one.
  const result = schema.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const param = issue.path.length > 0 ? issue.path.map(String).join('.') : null;
  const where = param ? `'${param}'` : 'request body';
  throw new InvalidRequestError(`Invalid ${where}: ${issue.message}`, {
    param,
    code: issue.code === 'invalid_type' && issue.input === undefined ? 'missing_required_parameter' : 'invalid_value',
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
