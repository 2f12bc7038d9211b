import { createHash } from 'node:crypto';
import { MAX_MEDIA_PER_REQUEST } from '../api/chat-media.js';
import { decodeAudio } from '../audio/decode.js';
import { InvalidRequestError, PayloadTooLargeError } from '../core/errors.js';
import { checkMediaInputs, type ChatMedia, type ChatRequest } from '../core/tasks/chat.js';
import type { Engine } from '../core/engine.js';
import { decodeImage, loadSharp } from '../image/decode.js';
import type { RgbImage } from '../image/types.js';
import { decodeBase64Payload, readRemoteInput, type InputPolicy } from './remote-input.js';

/**
 * Fetches and decodes the images and audio of a chat request (each API's
 * parts: api/chat-media.ts) before it reaches a model, under the limits
 * below, each a 4xx naming the part: sources as every request field that
 * names a file or URL (remote-input.ts: data URIs always, http(s) to public
 * addresses, local paths under --allow-local-files), images through sharp
 * (jpeg, png, webp, gif and the other raster formats; no SVG; one frame:
 * an animated image is refused, as OpenAI refuses one), audio as wav or mp3.
 */

/** Decoded pixels an image may have (its header is checked before decoding): a 12-megapixel photo fits. */
export const MAX_IMAGE_PIXELS = 50_000_000;
/**
 * Pixels an image is scaled down to before it reaches the model: the most
 * any supported projector reads (Qwen2.5-VL's max_pixels, 3584²); each
 * projector then resizes to its own grid.
 */
export const MODEL_IMAGE_PIXELS = 3584 * 3584;
/** Longest audio clip in a chat turn. */
export const MAX_AUDIO_SECONDS = 600;
/** Rate the projectors' audio encoders take (Whisper-style: 16 kHz mono). */
export const AUDIO_SAMPLE_RATE = 16_000;

/** Checks that the model takes the request's media, then fetches and decodes them: before the model loads. */
export async function prepareChatMedia(engine: Engine, request: ChatRequest, policy: InputPolicy, signal?: AbortSignal): Promise<void> {
  if (!request.messages.some((m) => m.media?.length)) return;
  checkMediaInputs(await engine.resolve(request.model, ['chat']), request);
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
    const bytes = await sourceBytes(item, policy, signal);
    if (item.kind === 'image') {
      item.image = await fitForModel(await decodeImage(bytes, { maxPixels: MAX_IMAGE_PIXELS, param: item.param, still: true }));
      item.hash = digest(item.image.data, `${item.image.width}x${item.image.height}`);
    } else {
      const decoded = await decodeAudio(bytes, { sampleRate: AUDIO_SAMPLE_RATE, maxDurationSec: MAX_AUDIO_SECONDS, param: item.param, signal });
      if (decoded.samples.length === 0) throw new InvalidRequestError(`'${item.param}': the audio has no samples.`, { param: item.param, code: 'empty_audio' });
      item.audio = decoded.samples;
      item.hash = digest(new Uint8Array(decoded.samples.buffer, decoded.samples.byteOffset, decoded.samples.byteLength), 'audio');
    }
  }
}

async function sourceBytes(item: ChatMedia, policy: InputPolicy, signal?: AbortSignal): Promise<Buffer> {
  const { source, param } = item;
  const bytes = 'url' in source ? await readRemoteInput(source.url, policy, param, signal) : decodeBase64Payload(source.base64, param);
  if (bytes.length > policy.maxBytes) throw new PayloadTooLargeError(`'${param}' is ${bytes.length} bytes; the limit is ${policy.maxBytes}.`, { param });
  return bytes;
}

/** The image scaled down (aspect kept) to at most MODEL_IMAGE_PIXELS. */
async function fitForModel(image: RgbImage): Promise<RgbImage> {
  const pixels = image.width * image.height;
  if (pixels <= MODEL_IMAGE_PIXELS) return image;
  const scale = Math.sqrt(MODEL_IMAGE_PIXELS / pixels);
  const width = Math.max(1, Math.floor(image.width * scale));
  const height = Math.max(1, Math.floor(image.height * scale));
  const sharp = await loadSharp();
  const data = await sharp(image.data, { raw: { width: image.width, height: image.height, channels: 3 } }).resize(width, height, { kernel: 'lanczos3' }).raw().toBuffer();
  return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width, height };
}

function digest(data: Uint8Array, label: string): string {
  return createHash('sha256').update(label).update(data).digest('hex');
}
