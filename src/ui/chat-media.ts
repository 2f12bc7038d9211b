/**
 * The chat panel's attachments as the API takes them (src/api/chat-media.ts):
 * which files can be attached, the server's limits (mirrored, so a refusal
 * comes before the upload and says the same numbers), and the conversation
 * as request messages whose user turns carry their media as content parts.
 * No DOM here: the unit tests run it under Node.
 */
import { formatBytes } from './units.js';

/** src/api/chat-media.ts MAX_MEDIA_PER_REQUEST. */
export const MAX_MEDIA_PER_REQUEST = 16;
/** src/core/tasks/chat-media.ts MAX_IMAGE_PIXELS. */
export const MAX_IMAGE_PIXELS = 50_000_000;
/** src/core/tasks/chat-media.ts MAX_AUDIO_SECONDS. */
export const MAX_AUDIO_SECONDS = 600;
/**
 * The default of `lserve serve --max-body` (64mb, decimal as every size here): the whole JSON request,
 * every attachment in it base64-encoded (the page cannot ask a server for
 * its own setting; a lower one still answers 413, shown as any error).
 */
export const MAX_BODY_BYTES = 64_000_000;

export type AudioFormat = 'wav' | 'mp3';
export type MediaType = { kind: 'image' } | { kind: 'audio'; format: AudioFormat };

export type Attachment = MediaType & {
  name: string;
  /** The file as a data URL (data:<type>;base64,…). */
  dataUrl: string;
  /** Where the page shows or plays it: the data URL, or for audio an object URL (the page's CSP plays no data: URLs). */
  url: string;
  /** Images: width × height. */
  pixels?: number;
  /** Audio: length, when the browser could read it. */
  seconds?: number;
};

export interface Turn {
  role: 'user' | 'assistant';
  content: string;
  attachments?: Attachment[];
}

/** Which request shape the panel sends: chat completions or the Responses API. */
export type Api = 'chat' | 'responses';

/** What a file can be attached as, from its type or (audio often comes untyped) its name; undefined when nothing. */
export function mediaTypeOf(type: string, name: string): MediaType | undefined {
  const mime = type.toLowerCase();
  // SVG is no raster image: the server's decoder refuses it.
  if (mime.startsWith('image/')) return mime === 'image/svg+xml' ? undefined : { kind: 'image' };
  if (/^audio\/(x-|vnd\.)?wave?$/.test(mime) || /\.wav$/i.test(name)) return { kind: 'audio', format: 'wav' };
  if (/^audio\/(mpeg|mp3)$/.test(mime) || /\.mp3$/i.test(name)) return { kind: 'audio', format: 'mp3' };
  return undefined;
}

/**
 * Why a request carrying these attachments would be refused by `model`
 * (taking `inputs`, its /v1/models input_modalities), or undefined. Pass every
 * attachment of the conversation: each turn resends the earlier ones.
 */
export function attachmentProblem(model: string, inputs: readonly string[], attachments: readonly Attachment[], api: Api): string | undefined {
  const takes = inputs.filter((k) => k !== 'text');
  for (const kind of ['image', 'audio'] as const) {
    if (!attachments.some((a) => a.kind === kind) || takes.includes(kind)) continue;
    const what = kind === 'image' ? 'images' : 'audio';
    const instead = takes.length ? `it takes ${takes.join(' and ')}` : 'it takes text only';
    return `${model} cannot read ${what} (${instead}): remove them, or clear the chat if earlier turns carry them, or pick a model that takes ${what}.`;
  }
  if (api === 'responses' && attachments.some((a) => a.kind === 'audio')) return 'The Responses API takes no audio: switch it off to send audio clips.';
  for (const a of attachments) {
    if (a.pixels !== undefined && a.pixels > MAX_IMAGE_PIXELS) return `${a.name} has ${(a.pixels / 1e6).toFixed(1)} megapixels; the server takes at most ${MAX_IMAGE_PIXELS / 1e6}.`;
    if (a.seconds !== undefined && a.seconds > MAX_AUDIO_SECONDS) return `${a.name} is ${Math.round(a.seconds)} s long; the server takes clips up to ${MAX_AUDIO_SECONDS} s.`;
  }
  if (attachments.length > MAX_MEDIA_PER_REQUEST) {
    return `A request carries at most ${MAX_MEDIA_PER_REQUEST} images and audio clips, and each turn resends the conversation's: this would be ${attachments.length}. Remove some, or clear the chat.`;
  }
  const bytes = attachments.reduce((n, a) => n + a.dataUrl.length, 0);
  if (bytes > MAX_BODY_BYTES) {
    return `The attachments come to ${formatBytes(bytes)} encoded, and each turn resends the conversation's; the server takes requests up to ${formatBytes(MAX_BODY_BYTES)} (lserve serve --max-body). Remove some, or clear the chat.`;
  }
  return undefined;
}

/** The conversation as request messages (chat completions' `messages`, or the Responses API's `input` items). */
export function messagesOf(history: readonly Turn[], api: Api): Array<{ role: Turn['role']; content: string | object[] }> {
  return history.map(({ role, content, attachments = [] }) => {
    if (role === 'assistant' || !attachments.length) return { role, content };
    const text = content ? [{ type: api === 'chat' ? 'text' : 'input_text', text: content }] : [];
    return { role, content: [...text, ...attachments.map((a) => part(a, api))] };
  });
}

function part(a: Attachment, api: Api): object {
  if (a.kind === 'image') return api === 'chat' ? { type: 'image_url', image_url: { url: a.dataUrl } } : { type: 'input_image', image_url: a.dataUrl };
  // attachmentProblem keeps audio from the Responses API; a request that got here anyway is refused by the server, naming the part.
  return { type: 'input_audio', input_audio: { data: a.dataUrl.slice(a.dataUrl.indexOf(',') + 1), format: a.format } };
}
