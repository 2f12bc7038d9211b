import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { MAX_MEDIA_PER_REQUEST, partsToContent } from '../../src/api/chat-media.js';
import { parseChatCompletion, toChatRequest } from '../../src/api/chat.js';
import { parseMessages } from '../../src/api/anthropic/schema.js';
import { toChatRequest as toAnthropicChat } from '../../src/api/anthropic/to-chat.js';

const anthropicRequest = (body: ReturnType<typeof parseMessages>) => toAnthropicChat(body, { open: () => undefined }).request;
import { parseResponseCreate, toChatRequest as toResponsesChat } from '../../src/api/responses/request.js';

const responsesRequest = (...args: Parameters<typeof toResponsesChat>) => toResponsesChat(...args).request;
import { MEDIA_MARKER, type ChatRequest } from '../../src/core/tasks/chat.js';
import { loadChatMedia } from '../../src/http/chat-media.js';
import { MODEL_IMAGE_PIXELS } from '../../src/core/tasks/chat-media.js';
import { pngHeader } from '../helpers/png.js';
import { encodeAudio } from '../../src/audio/encode/index.js';

/**
 * Images and audio in chat turns: each API's parts become the turn's text
 * with a marker where each sits, and the server fetches and decodes them
 * under its limits (http/chat-media.ts), every bad input a 4xx naming the
 * part.
 */

const policy = { localDirs: [], allowPrivate: [], maxBytes: 8 * 1024 * 1024 };
const png = (width: number, height: number, colour = '#3366cc') => sharp({ create: { width, height, channels: 3, background: colour } }).png().toBuffer();
const dataUri = (bytes: Buffer, type = 'image/png') => `data:${type};base64,${bytes.toString('base64')}`;

/** A 0.5 s 440 Hz tone as a 16-bit PCM WAV at `rate`. */
async function wav(rate = 8000, seconds = 0.5): Promise<Buffer> {
  const tone = Float32Array.from({ length: Math.round(rate * seconds) }, (_, i) => 0.25 * Math.sin((2 * Math.PI * 440 * i) / rate));
  return Buffer.from(await encodeAudio('wav', tone, rate));
}

function request(content: unknown): ChatRequest {
  return toChatRequest(parseChatCompletion({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content }] }));
}

describe('media parts', () => {
  it('OpenAI: text with a marker where each image and clip sits, the media in order, named by their field', async () => {
    const image = dataUri(await png(4, 4));
    const chat = request([
      { type: 'text', text: 'Compare ' },
      { type: 'image_url', image_url: { url: image, detail: 'low' } },
      { type: 'text', text: ' with ' },
      { type: 'image_url', image_url: 'https://example.com/b.png' },
      { type: 'input_audio', input_audio: { data: (await wav()).toString('base64'), format: 'wav' } },
    ]);
    const user = chat.messages[1]!;
    expect(user.content).toBe(`Compare ${MEDIA_MARKER} with ${MEDIA_MARKER}${MEDIA_MARKER}`);
    expect(user.media!.map((m) => [m.kind, m.param])).toEqual([
      ['image', 'messages.1.content.1'],
      ['image', 'messages.1.content.3'],
      ['audio', 'messages.1.content.4'],
    ]);
    expect(user.media![1]!.source).toEqual({ url: 'https://example.com/b.png' });
  });

  it('a marker typed by the client is text, not a slot for media', () => {
    expect(partsToContent(`look ${MEDIA_MARKER} here`, 'x').content).toBe('look  here');
    expect(request([{ type: 'text', text: `a ${MEDIA_MARKER} b` }]).messages[1]!.content).toBe('a  b');
  });

  it('Anthropic image blocks (base64 and url) and Responses input_image', async () => {
    const data = (await png(4, 4)).toString('base64');
    const anthropic = anthropicRequest(
      parseMessages({
        model: 'm',
        max_tokens: 8,
        messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data } }, { type: 'image', source: { type: 'url', url: 'https://example.com/c.jpg' } }, { type: 'text', text: 'What is this?' }] }],
      }),
    );
    expect(anthropic.messages[0]!.content).toBe(`${MEDIA_MARKER}${MEDIA_MARKER}What is this?`);
    expect(anthropic.messages[0]!.media!.map((m) => m.param)).toEqual(['messages.0.content.0', 'messages.0.content.1']);
    const responses = responsesRequest(parseResponseCreate({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Describe ' }, { type: 'input_image', image_url: dataUri(Buffer.from(data, 'base64')) }] }] }), []);
    expect(responses.messages[0]!.content).toBe(`Describe ${MEDIA_MARKER}`);
    expect(responses.messages[0]!.media![0]).toMatchObject({ kind: 'image', param: 'input.0.content.1' });
    // A conversation continued from a stored response: its images are named by the field that brought them.
    const earlier = [{ type: 'message' as const, role: 'user' as const, content: [{ type: 'input_image' as const, image_url: 'https://example.com/old.png' }] }];
    const continued = responsesRequest(parseResponseCreate({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/new.png' }] }] }), earlier);
    expect(continued.messages.map((m) => m.media![0]!.param)).toEqual(['previous_response_id', 'input.0.content.0']);
  });

  it('refuses parts it does not know, in the turns that cannot carry media, with their field', () => {
    expect(() => request([{ type: 'image_url' }])).toThrow(/messages\.1\.content\.0\.image_url/);
    expect(() => request([{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'ogg' } }])).toThrow(/'wav' or 'mp3'/);
    expect(() => request([{ type: 'file', file: {} }])).toThrow(/'text', 'image_url' or 'input_audio'/);
    expect(() => toChatRequest(parseChatCompletion({ model: 'm', messages: [{ role: 'system', content: [{ type: 'image_url', image_url: 'https://example.com/a.png' }] }] }))).toThrow(/messages\.0\.content/);
    expect(() => parseMessages({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/svg+xml', data: 'AAAA' } }] }] })).toThrow(/media_type/);
    expect(() => parseMessages({ model: 'm', max_tokens: 8, messages: [{ role: 'assistant', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] }] })).toThrow(/messages\.0\.content/);
  });
});

describe('loading media', () => {
  it('decodes images to upright RGB and audio to 16 kHz mono, with a hash of what was decoded', async () => {
    const chat = request([
      { type: 'image_url', image_url: { url: dataUri(await png(30, 20)) } },
      { type: 'image_url', image_url: { url: dataUri(await png(30, 20)) } },
      { type: 'image_url', image_url: { url: dataUri(await png(30, 20, '#cc3366')) } },
      { type: 'input_audio', input_audio: { data: (await wav()).toString('base64'), format: 'wav' } },
    ]);
    await loadChatMedia(chat, policy);
    const [a, b, c, audio] = chat.messages[1]!.media!;
    expect(a!.image).toMatchObject({ width: 30, height: 20 });
    expect(a!.image!.data.length).toBe(30 * 20 * 3);
    expect(b!.hash).toBe(a!.hash);
    expect(c!.hash).not.toBe(a!.hash);
    expect(audio!.audio!.length).toBe(8000);
  });

  it('scales an image down to the pixels a projector reads at most, keeping its aspect', async () => {
    const chat = request([{ type: 'image_url', image_url: dataUri(await png(6000, 3000)) }]);
    await loadChatMedia(chat, { ...policy, maxBytes: 64 * 1024 * 1024 });
    const { width, height } = chat.messages[1]!.media![0]!.image!;
    expect(width * height).toBeLessThanOrEqual(MODEL_IMAGE_PIXELS);
    expect(width / height).toBeCloseTo(2, 2);
  });

  it('every bad input is a 4xx naming its part', async () => {
    const red = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#ff0000' } }).png().toBuffer();
    const blue = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#0000ff' } }).png().toBuffer();
    const animated = await sharp([red, blue], { join: { animated: true } }).gif().toBuffer();
    const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>');
    const cases: Array<[unknown, number, string | RegExp]> = [
      [{ type: 'image_url', image_url: dataUri(red.subarray(0, red.length - 30)) }, 400, 'invalid_image'],
      [{ type: 'image_url', image_url: 'data:image/png;base64,' }, 400, 'empty_image'],
      [{ type: 'image_url', image_url: dataUri(Buffer.from('not an image at all'), 'image/png') }, 400, 'invalid_image'],
      [{ type: 'image_url', image_url: dataUri(svg, 'image/svg+xml') }, 400, 'invalid_image'],
      [{ type: 'image_url', image_url: dataUri(animated, 'image/gif') }, 400, 'invalid_image'],
      [{ type: 'image_url', image_url: dataUri(pngHeader(20_000, 20_000)) }, 413, 'image_too_large'],
      [{ type: 'image_url', image_url: 'http://127.0.0.1:9/a.png' }, 403, /private|not public|loopback/i],
      [{ type: 'image_url', image_url: '/etc/passwd' }, 403, 'local_files_forbidden'],
      [{ type: 'input_audio', input_audio: { data: Buffer.from('RIFF....WAVEjunk').toString('base64'), format: 'wav' } }, 400, 'invalid_audio'],
      [{ type: 'input_audio', input_audio: { data: '%%%', format: 'mp3' } }, 400, 'invalid_base64'],
    ];
    for (const [part, status, code] of cases) {
      const chat = request([{ type: 'text', text: 'x' }, part]);
      const error = await loadChatMedia(chat, policy).then(
        () => undefined,
        (e: unknown) => e as { status: number; code: string; param: string; message: string },
      );
      expect(error, JSON.stringify(part).slice(0, 80)).toBeDefined();
      expect(error!.status, error!.message).toBe(status);
      if (typeof code === 'string') expect(error!.code).toBe(code);
      else expect(`${error!.code} ${error!.message}`).toMatch(code);
      expect(error!.param).toBe('messages.1.content.1');
    }
  });

  it(`refuses more than ${MAX_MEDIA_PER_REQUEST} images and clips in one request`, async () => {
    const image = { type: 'image_url', image_url: dataUri(await png(2, 2)) };
    const chat = request(Array.from({ length: MAX_MEDIA_PER_REQUEST + 1 }, () => image));
    await expect(loadChatMedia(chat, policy)).rejects.toMatchObject({ status: 400, code: 'too_many_media', param: `messages.1.content.${MAX_MEDIA_PER_REQUEST}` });
  });
});
