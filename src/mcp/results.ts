import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { isLserveError } from '../core/errors.js';
import type { McpContext } from './context.js';

/** What the SDK hands a tool besides its arguments: the request's signal, its progress token, a way to notify. */
export type ToolExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/**
 * A tool's answer: its structured content (checked by the SDK against the
 * tool's outputSchema) and, for clients that read only text, the same as JSON
 * text, as the MCP specification asks; `content` leads with media blocks
 * where the tool makes media (audio, an image).
 */
export function structured<T extends Record<string, unknown>>(data: T, media: CallToolResult['content'] = []): CallToolResult & { structuredContent: T } {
  return { content: [...media, { type: 'text', text: JSON.stringify(data) }], structuredContent: data };
}

/**
 * A failure as a tool error result (`isError: true`): the agent reads it and
 * can act on it (pull the model it names, fix an argument), where a protocol
 * error would only say that the call failed. Errors of lserve's own carry a
 * message written for the user; anything else is a fault, logged in full and
 * told in one line.
 */
export function toolError(error: unknown, ctx: McpContext): CallToolResult {
  if (isLserveError(error) && error.status < 500) return { isError: true, content: [{ type: 'text', text: error.message }] };
  if (isLserveError(error) && error.status === 503) return { isError: true, content: [{ type: 'text', text: error.message }] };
  const message = error instanceof Error ? error.message : String(error);
  if (!(error instanceof Error && error.name === 'AbortError')) ctx.log(`mcp tool failed: ${error instanceof Error ? (error.stack ?? message) : message}`);
  return { isError: true, content: [{ type: 'text', text: message }] };
}

/** The signal a tool's work stops on: the client's cancellation (`extra.signal`), or the context's (request gone, shutdown). */
export function callSignal(ctx: McpContext, extra: ToolExtra): AbortSignal {
  return ctx.signal ? AbortSignal.any([extra.signal, ctx.signal]) : extra.signal;
}

/**
 * Runs a tool's work, turning any failure into a tool error result (not a
 * protocol error), with the call's signal.
 */
export async function runTool(ctx: McpContext, extra: ToolExtra, work: (signal: AbortSignal) => Promise<CallToolResult>): Promise<CallToolResult> {
  const signal = callSignal(ctx, extra);
  try {
    return await work(signal);
  } catch (error) {
    return toolError(signal.aborted && !isLserveError(error) ? (signal.reason ?? error) : error, ctx);
  }
}

/**
 * Progress notifications for a call whose client asked for them (a
 * `progressToken` in the request's `_meta`); a no-op otherwise. Never throws:
 * a notification that cannot be sent changes nothing about the work.
 */
export function progressReporter(extra: ToolExtra): (progress: number, total?: number, message?: string) => void {
  const token = extra._meta?.progressToken;
  if (token === undefined) return () => {};
  let last = -1;
  return (progress, total, message) => {
    // Progress must increase with each notification (MCP specification).
    if (progress <= last) return;
    last = progress;
    void extra
      .sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, ...(total === undefined ? {} : { total }), ...(message === undefined ? {} : { message }) } })
      .catch(() => {});
  };
}
