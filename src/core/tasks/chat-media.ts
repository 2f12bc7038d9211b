import { createHash } from 'node:crypto';
import { decodeAudio } from '../../audio/decode.js';
import { InvalidRequestError } from '../errors.js';
import { decodeImage, loadSharp } from '../../image/decode.js';
import type { RgbImage } from '../../image/types.js';
import type { ChatMedia } from './chat.js';

/**
 * Decoding a chat turn's image or audio clip (the bytes fetched by the
 * server, http/chat-media.ts, or read by the CLI): images through sharp
 * (jpeg, png, webp, gif and the other raster formats; no SVG; one frame: an
 * animated image is refused, as OpenAI refuses one), audio through the
 * audio decoder (wav, mp3, …), each under the limits below, every bad input
 * a 4xx naming the part.
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

/** Decodes `bytes` into the item (`image` or `audio`), with the SHA-256 of what was decoded. */
export async function decodeChatMedia(item: ChatMedia, bytes: Uint8Array, signal?: AbortSignal): Promise<void> {
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
