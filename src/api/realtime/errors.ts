import type { z } from 'zod';
import { InvalidRequestError } from '../../core/errors.js';

/**
 * A client event the Realtime session cannot accept. Unlike an HTTP 400 it
 * ends nothing: the session answers it with an `error` server event (see
 * server-events.ts) and goes on with the next event. The codes are OpenAI's
 * where it has one (its HTTP API's `missing_required_parameter`,
 * `string_above_max_length`, …), so a client written against OpenAI reads
 * them the same way.
 */
export type RealtimeErrorCode =
  | 'invalid_json'
  | 'too_deeply_nested'
  | 'unknown_event'
  | 'missing_required_parameter'
  | 'invalid_type'
  | 'invalid_value'
  | 'unknown_parameter'
  | 'unsupported_parameter'
  | 'string_above_max_length'
  | 'array_above_max_length';

export class RealtimeEventError extends InvalidRequestError {
  declare readonly code: RealtimeErrorCode;
  /** The client's `event_id` of the event at fault, echoed in the error event so the client can match them. */
  readonly eventId: string | undefined;

  constructor(code: RealtimeErrorCode, message: string, options: { param?: string | null; eventId?: string } = {}) {
    super(message, { code, param: options.param ?? null });
    this.eventId = options.eventId;
  }
}

/** Which event is being read, for messages and the echoed id; `prefix` is where the parsed value sits in it ('session'). */
export interface EventContext {
  event: string;
  eventId?: string;
  prefix?: ReadonlyArray<PropertyKey>;
}

/**
 * Parse `input` with `schema`; the first issue becomes a RealtimeEventError
 * whose `param` is the dotted path from the event's root
 * ('item.content.0.type') and whose message names the event and that path.
 */
export function parseWith<S extends z.ZodType>(schema: S, input: unknown, where: EventContext): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw issueError(result.error.issues[0]!, input, where);
}

function issueError(issue: z.core.$ZodIssue, input: unknown, where: EventContext): RealtimeEventError {
  const path = [...(where.prefix ?? []), ...issue.path];
  // An unknown key is reported on its object: name the key itself.
  if (issue.code === 'unrecognized_keys') path.push(issue.keys[0]!);
  const param = path.length > 0 ? path.map(String).join('.') : null;
  const fail = (code: RealtimeErrorCode, message: string) => new RealtimeEventError(code, `${where.event}: ${message}`, { param, eventId: where.eventId });
  // The value itself decides "missing": zod reports an absent discriminator as a union mismatch, and does not always keep the input.
  const missing = valueAt(input, issue.path) === undefined;
  switch (issue.code) {
    case 'unrecognized_keys':
      return fail('unknown_parameter', `unknown parameter '${param}'.`);
    case 'invalid_type':
    case 'invalid_union':
      if (missing) return fail('missing_required_parameter', `missing required parameter '${param}'.`);
      return fail(issue.code === 'invalid_type' ? 'invalid_type' : 'invalid_value', `invalid '${param}': ${issue.message}`);
    case 'too_big':
      if (issue.origin === 'string') return fail('string_above_max_length', `'${param}' is too long: ${issue.message}`);
      if (issue.origin === 'array') return fail('array_above_max_length', `'${param}' has too many entries: ${issue.message}`);
      break;
    case 'custom': {
      // A schema's own check may name a more precise code (`params: { code }`), as in api/validate.ts.
      const own = issue.params?.code as RealtimeErrorCode | undefined;
      if (own) return fail(own, `${own === 'missing_required_parameter' ? 'missing required parameter' : 'invalid'} '${param}': ${issue.message}`);
      break;
    }
  }
  return fail('invalid_value', `invalid '${param ?? 'event'}': ${issue.message}`);
}

function valueAt(root: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let value = root;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}
