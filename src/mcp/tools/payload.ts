import { z } from 'zod';
import type { McpContext } from '../context.js';

/**
 * The three fields a payload argument comes as (mcp/inputs.ts): base64 or a
 * data URI, an http(s) URL, and over stdio a local path. Over HTTP the path
 * field is not in the schema, so a path given there is refused by name.
 */
export function payloadFields(name: string, what: string, ctx: McpContext) {
  return {
    [`${name}_base64`]: z.string().min(1).optional().describe(`The ${what} as base64 or a data URI.`),
    [`${name}_url`]: z.string().min(1).max(8192).optional().describe(`An http(s) URL of the ${what} (public addresses, unless the server allows private ones).`),
    ...(ctx.localFiles ? { [`${name}_path`]: z.string().min(1).max(4096).optional().describe(`A local file path of the ${what}.`) } : {}),
  } as Record<string, z.ZodOptional<z.ZodString>>;
}

/** The payload fields out of a call's arguments. */
export function payloadOf(name: string, args: Record<string, unknown>): { base64?: string; url?: string; path?: string } {
  const field = (key: string) => (typeof args[`${name}_${key}`] === 'string' ? (args[`${name}_${key}`] as string) : undefined);
  return { base64: field('base64'), url: field('url'), path: field('path') };
}
