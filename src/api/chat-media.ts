import { z } from 'zod';
import { MEDIA_MARKER, type ChatMedia } from '../core/tasks/chat.js';

/**
 * Content parts that carry images and audio, as each API spells them, turned
 * into the engine's form: the message text with MEDIA_MARKER where each one
 * sits, and the list of what to fetch (core/tasks/chat.ts ChatMedia).
 * - OpenAI chat: `{type: 'image_url', image_url: {url, detail?}}` (a data
 *   URI, an http(s) URL, a local path under --allow-local-files) and
 *   `{type: 'input_audio', input_audio: {data, format: 'wav' | 'mp3'}}`;
 * - Anthropic: `{type: 'image', source: {type: 'base64', media_type, data} | {type: 'url', url}}`;
 * - Responses: `{type: 'input_image', image_url, detail?}`.
 * A client's text cannot smuggle a marker in: it is removed from text.
 */

/** Most images and audio clips one request may carry. */
export const MAX_MEDIA_PER_REQUEST = 16;

export const openAiImagePart = z.object({
  type: z.literal('image_url'),
  image_url: z.union([z.string().min(1), z.object({ url: z.string().min(1), detail: z.enum(['auto', 'low', 'high']).optional() })]),
});

export const openAiAudioPart = z.object({
  type: z.literal('input_audio'),
  input_audio: z.object({ data: z.string().min(1), format: z.enum(['wav', 'mp3'], "format must be 'wav' or 'mp3'") }),
});

export const anthropicImageBlock = z.object({
  type: z.literal('image'),
  source: z.discriminatedUnion('type', [
    z.object({
      type: z.literal('base64'),
      media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp'], 'media_type must be image/jpeg, image/png, image/gif or image/webp'),
      data: z.string().min(1),
    }),
    z.object({ type: z.literal('url'), url: z.string().min(1) }),
  ]),
  cache_control: z.unknown().optional(),
});

export const responsesImagePart = z.object({
  type: z.literal('input_image'),
  image_url: z.string().min(1, 'input_image needs image_url (file ids are not stored here)'),
  detail: z.enum(['auto', 'low', 'high']).optional(),
});

type OpenAiImagePart = z.infer<typeof openAiImagePart>;
type OpenAiAudioPart = z.infer<typeof openAiAudioPart>;
type AnthropicImageBlock = z.infer<typeof anthropicImageBlock>;
type ResponsesImagePart = z.infer<typeof responsesImagePart>;
export type MediaPart = OpenAiImagePart | OpenAiAudioPart | AnthropicImageBlock | ResponsesImagePart;

const isText = (part: { type: string }): part is { type: string; text: string } => 'text' in part && typeof part.text === 'string';

/** What one media part asks to fetch. */
function mediaOf(part: MediaPart, param: string): ChatMedia {
  switch (part.type) {
    case 'image_url':
      return { kind: 'image', param, source: { url: typeof part.image_url === 'string' ? part.image_url : part.image_url.url } };
    case 'input_image':
      return { kind: 'image', param, source: { url: part.image_url } };
    case 'input_audio':
      return { kind: 'audio', param, source: { base64: part.input_audio.data, format: part.input_audio.format } };
    case 'image':
      return { kind: 'image', param, source: part.source.type === 'url' ? { url: part.source.url } : { base64: part.source.data, format: part.source.media_type } };
  }
}

/**
 * A message's content (a string, or text and media parts) as text with a
 * marker per media part, and the media in order. `param` names the
 * message's content field ('messages.1.content').
 */
export function partsToContent(content: string | ReadonlyArray<{ type: string }> | null | undefined, param: string): { content: string; media: ChatMedia[] } {
  const clean = (text: string) => text.split(MEDIA_MARKER).join('');
  if (content == null) return { content: '', media: [] };
  if (typeof content === 'string') return { content: clean(content), media: [] };
  const media: ChatMedia[] = [];
  let text = '';
  content.forEach((part, i) => {
    if (isText(part)) {
      text += clean(part.text);
    } else {
      media.push(mediaOf(part as MediaPart, `${param}.${i}`));
      text += MEDIA_MARKER;
    }
  });
  return { content: text, media };
}
