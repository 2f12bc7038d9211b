import { describe, expect, it } from 'vitest';
import * as server from '../../src/api/chat-media.js';
import { parseChatCompletion, toChatRequest } from '../../src/api/chat.js';
import { parseResponseCreate, toChatRequest as toResponsesChat } from '../../src/api/responses/request.js';

const responsesRequest = (...args: Parameters<typeof toResponsesChat>) => toResponsesChat(...args).request;
import { serveCommand } from '../../src/cli/commands/serve.js';
import { MAX_AUDIO_SECONDS, MAX_IMAGE_PIXELS } from '../../src/core/tasks/chat-media.js';
import { MEDIA_MARKER } from '../../src/core/tasks/chat.js';
import { parseByteSize } from '../../src/core/units.js';
import * as ui from '../../src/ui/chat-media.js';
import { attachmentProblem, mediaTypeOf, messagesOf, type Attachment, type Turn } from '../../src/ui/chat-media.js';

/**
 * The playground's chat attachments (src/ui/chat-media.ts): the messages it
 * builds are read by the server's own request parsers into the media the
 * engine fetches, and its limits are the server's.
 */

const PNG = 'data:image/png;base64,iVBORw0KGgo=';
const WAV = 'data:audio/wav;base64,UklGRiQAAABXQVZF';
const image = (over: Partial<Attachment> = {}): Attachment => ({ kind: 'image', name: 'cat.png', dataUrl: PNG, url: PNG, pixels: 64, ...over }) as Attachment;
const clip = (over: Partial<Attachment> = {}): Attachment => ({ kind: 'audio', format: 'wav', name: 'hi.wav', dataUrl: WAV, url: 'blob:x', seconds: 1.5, ...over }) as Attachment;

const conversation: Turn[] = [
  { role: 'user', content: 'What is this?', attachments: [image(), clip()] },
  { role: 'assistant', content: 'A cat, meowing.' },
  { role: 'user', content: 'And now?' },
];

describe('messagesOf', () => {
  it('chat completions: a user turn with media is text then image_url and input_audio parts, resent on later turns', () => {
    const messages = messagesOf(conversation, 'chat');
    expect(messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url: PNG } },
          { type: 'input_audio', input_audio: { data: 'UklGRiQAAABXQVZF', format: 'wav' } },
        ],
      },
      { role: 'assistant', content: 'A cat, meowing.' },
      { role: 'user', content: 'And now?' },
    ]);
    const request = toChatRequest(parseChatCompletion({ model: 'm', messages }));
    expect(request.messages[0]!.content).toBe(`What is this?${MEDIA_MARKER}${MEDIA_MARKER}`);
    expect(request.messages[0]!.media!.map((m) => [m.kind, m.param, m.source])).toEqual([
      ['image', 'messages.0.content.1', { url: PNG }],
      ['audio', 'messages.0.content.2', { base64: 'UklGRiQAAABXQVZF', format: 'wav' }],
    ]);
    expect(request.messages[2]!.media ?? []).toEqual([]);
  });

  it('media without text: only the media parts', () => {
    expect(messagesOf([{ role: 'user', content: '', attachments: [image()] }], 'chat')).toEqual([{ role: 'user', content: [{ type: 'image_url', image_url: { url: PNG } }] }]);
  });

  it('the Responses API: input_text and input_image parts, read by its parser', () => {
    const input = messagesOf([{ role: 'user', content: 'Describe.', attachments: [image()] }], 'responses');
    expect(input).toEqual([{ role: 'user', content: [{ type: 'input_text', text: 'Describe.' }, { type: 'input_image', image_url: PNG }] }]);
    const request = responsesRequest(parseResponseCreate({ model: 'm', input }), []);
    expect(request.messages.at(-1)!.media!.map((m) => [m.kind, m.source])).toEqual([['image', { url: PNG }]]);
  });
});

describe('attachmentProblem', () => {
  const both = ['text', 'image', 'audio'];

  it('nothing to say about text, or media the model takes within the limits', () => {
    expect(attachmentProblem('m', ['text'], [], 'chat')).toBeUndefined();
    expect(attachmentProblem('m', both, [image(), clip()], 'chat')).toBeUndefined();
  });

  it('media the model does not take', () => {
    expect(attachmentProblem('qwen3', ['text'], [image()], 'chat')).toMatch(/^qwen3 cannot read images \(it takes text only\)/);
    expect(attachmentProblem('vl', ['text', 'image'], [image(), clip()], 'chat')).toMatch(/^vl cannot read audio \(it takes image\)/);
  });

  it('audio through the Responses API', () => {
    expect(attachmentProblem('m', both, [clip()], 'responses')).toMatch(/Responses API takes no audio/);
    expect(attachmentProblem('m', both, [image()], 'responses')).toBeUndefined();
  });

  it('the server’s limits: megapixels, seconds, media per request, the body size', () => {
    expect(attachmentProblem('m', both, [image({ pixels: MAX_IMAGE_PIXELS })], 'chat')).toBeUndefined();
    expect(attachmentProblem('m', both, [image({ pixels: MAX_IMAGE_PIXELS + 1 })], 'chat')).toMatch(/cat\.png has 50\.0 megapixels; the server takes at most 50/);
    expect(attachmentProblem('m', both, [clip({ seconds: MAX_AUDIO_SECONDS + 1 })], 'chat')).toMatch(/hi\.wav is 601 s long/);
    const many = Array.from({ length: ui.MAX_MEDIA_PER_REQUEST }, () => image());
    expect(attachmentProblem('m', both, many, 'chat')).toBeUndefined();
    expect(attachmentProblem('m', both, [...many, clip()], 'chat')).toMatch(/at most 16 images and audio clips.*this would be 17/);
    const half = 'x'.repeat(ui.MAX_BODY_BYTES / 2);
    expect(attachmentProblem('m', both, [image({ dataUrl: half }), image({ dataUrl: half })], 'chat')).toBeUndefined();
    expect(attachmentProblem('m', both, [image({ dataUrl: half }), image({ dataUrl: `${half}x` })], 'chat')).toMatch(/64\.0 MB encoded.*up to 64\.0 MB \(lserve serve --max-body\)/);
  });

  it('mirrors the server’s numbers', () => {
    expect(ui.MAX_MEDIA_PER_REQUEST).toBe(server.MAX_MEDIA_PER_REQUEST);
    expect(ui.MAX_IMAGE_PIXELS).toBe(MAX_IMAGE_PIXELS);
    expect(ui.MAX_AUDIO_SECONDS).toBe(MAX_AUDIO_SECONDS);
    const maxBody = serveCommand().options.find((o) => o.long === '--max-body')!.defaultValue as string;
    expect(ui.MAX_BODY_BYTES).toBe(parseByteSize(maxBody));
  });
});

describe('mediaTypeOf', () => {
  it('raster images by type; WAV and MP3 by type or name; nothing else', () => {
    expect(mediaTypeOf('image/png', 'a.png')).toEqual({ kind: 'image' });
    expect(mediaTypeOf('image/webp', '')).toEqual({ kind: 'image' });
    expect(mediaTypeOf('image/svg+xml', 'a.svg')).toBeUndefined();
    for (const type of ['audio/wav', 'audio/x-wav', 'audio/wave', 'audio/vnd.wave']) expect(mediaTypeOf(type, 'clip')).toEqual({ kind: 'audio', format: 'wav' });
    expect(mediaTypeOf('', 'Clip.WAV')).toEqual({ kind: 'audio', format: 'wav' });
    expect(mediaTypeOf('audio/mpeg', 'clip')).toEqual({ kind: 'audio', format: 'mp3' });
    expect(mediaTypeOf('application/octet-stream', 'song.mp3')).toEqual({ kind: 'audio', format: 'mp3' });
    expect(mediaTypeOf('audio/ogg', 'a.ogg')).toBeUndefined();
    expect(mediaTypeOf('text/plain', 'notes.txt')).toBeUndefined();
  });
});
