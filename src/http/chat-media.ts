import { MAX_MEDIA_PER_REQUEST } from '../api/chat-media.js';
import { InvalidRequestError, PayloadTooLargeError } from '../core/errors.js';
import { decodeChatMedia } from '../core/tasks/chat-media.js';
import { checkChatMedia, type ChatMedia, type ChatRequest } from '../core/tasks/chat.js';
import type { Engine } from '../core/engine.js';
import { decodeBase64Payload, readRemoteInput, type InputPolicy } from './remote-input.js';

/**
 * Fetches the images and audio of a chat request (each API's parts:
 * api/chat-media.ts) before it reaches a model, as every request field that
 * names a file or URL (remote-input.ts: data URIs always, http(s) to public
 * addresses, local paths under --allow-local-files), and decodes them
 * (core/tasks/chat-media.ts); at most MAX_MEDIA_PER_REQUEST a request.
 */

/** Checks that the model takes the request's media, then fetches and decodes them: before the model loads. */
export async function prepareChatMedia(engine: Engine, request: ChatRequest, policy: InputPolicy, signal?: AbortSignal): Promise<void> {
  await checkChatMedia(engine, request);
  await loadChatMedia(request, policy, signal);
}

export async function loadChatMedia(request: ChatRequest, policy: InputPolicy, signal?: AbortSignal): Promise<void> {
  const media = request.messages.flatMap((m) => m.media ?? []);
  if (media.length > MAX_MEDIA_PER_REQUEST) {
    throw new InvalidRequestError(`The request carries ${media.length} images and audio clips; the limit is ${MAX_MEDIA_PER_REQUEST}.`, { param: media[MAX_MEDIA_PER_REQUEST]!.param, code: 'too_many_media' });
  }
  // One at a time: decoded images are large, and a bad one should fail the request before the next is fetched.
  for (const item of media) {
    signal?.throwIfAborted();
    await decodeChatMedia(item, await sourceBytes(item, policy, signal), signal);
  }
}

async function sourceBytes(item: ChatMedia, policy: InputPolicy, signal?: AbortSignal): Promise<Buffer> {
  const { source, param } = item;
  const bytes = 'bytes' in source ? Buffer.from(source.bytes) : 'url' in source ? await readRemoteInput(source.url, policy, param, signal) : decodeBase64Payload(source.base64, param);
  if (bytes.length > policy.maxBytes) throw new PayloadTooLargeError(`'${param}' is ${bytes.length} bytes; the limit is ${policy.maxBytes}.`, { param });
  return bytes;
}

