import { z } from 'zod';
import { parseDuration } from '../core/units.js';

/**
 * `keep_alive` (Ollama's extension, accepted on every model endpoint): how
 * long the model stays loaded after this request — "5m", "30s", a number of
 * seconds, 0 to unload at once, or a negative value for "forever". Parsed to
 * milliseconds (negative = forever).
 */
export const keepAliveField = z
  .union([z.string(), z.number()])
  .optional()
  .transform((value, ctx) => {
    if (value === undefined) return undefined;
    try {
      return parseDuration(value);
    } catch (error) {
      ctx.issues.push({ code: 'custom', message: (error as Error).message, input: value });
      return z.NEVER;
    }
  });

/** Message content as plain text: a string, or text parts/blocks joined (OpenAI and Anthropic both allow either). */
export function textContent(value: string | ReadonlyArray<{ text: string }> | null | undefined): string {
  if (value == null) return '';
  return typeof value === 'string' ? value : value.map((part) => part.text).join('');
}

/**
 * A string (checked by `string`, any string when omitted), or what `other`
 * accepts, dispatched on the value's type: a plain union of the two reports
 * only "Invalid input", where this names the element and field at fault
 * ('messages.1.content.0.image_url') and keeps each side's own message.
 */
export function stringOr<T extends z.ZodType, S extends z.ZodType<string> = z.ZodString>(other: T, string?: S) {
  return z.unknown().transform((value, ctx): z.output<S> | z.output<T> => {
    const parsed = (typeof value === 'string' ? (string ?? z.string()) : other).safeParse(value);
    if (parsed.success) return parsed.data as z.output<S> | z.output<T>;
    for (const issue of parsed.error.issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0]);
    return z.NEVER;
  });
}
