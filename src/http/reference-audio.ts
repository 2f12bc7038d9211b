import path from 'node:path';
import type { ServerContext } from './context.js';
import { decodeBase64Payload, readRemoteInput } from './remote-input.js';

/**
 * `ref_audio` (a realtime session's too, named `param`): a data URI, path or URL under the rules of remote-input.ts, or bare base64.
 * Beside the routes rather than in one: POST /v1/audio/speech and GET /v1/realtime both read it, and a route imports no other route.
 */
export async function referenceAudio(value: string, ctx: ServerContext, signal: AbortSignal, param = 'ref_audio'): Promise<Buffer> {
  if (/^(data:|https?:\/\/|file:\/\/|\/)/i.test(value) || path.isAbsolute(value)) {
    return readRemoteInput(value, ctx.inputs, param, signal);
  }
  return decodeBase64Payload(value, param, 'audio/');
}
