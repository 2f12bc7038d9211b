import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import sharp from 'sharp';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_MODEL_ID, startChatServer } from '../helpers/chat-model.js';
import type { TestServer } from '../helpers/server.js';

/**
 * Images and audio in chat through the official SDKs. A model without a
 * projector is asked with each API's part: a 400 that names the model and
 * the part, never an answer that silently dropped the picture; and the
 * server keeps serving.
 */

let server: TestServer;
let client: OpenAI;
let image: string;

beforeAll(async () => {
  ({ server, client } = await startChatServer());
  image = (await sharp({ create: { width: 8, height: 8, channels: 3, background: '#3366cc' } }).png().toBuffer()).toString('base64');
});

afterAll(async () => {
  await server?.stop();
});

describe('a text-only model given media', () => {
  it('OpenAI chat: image_url and input_audio parts are 400s naming the model and the part', async () => {
    const image_url = { url: `data:image/png;base64,${image}` };
    const refused = client.chat.completions.create({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url }] }] });
    await expect(refused).rejects.toMatchObject({ status: 400, param: 'messages.0.content.1', code: 'unsupported_input' });
    await expect(refused).rejects.toThrow(new RegExp(`Model '${CHAT_MODEL_ID}' takes text only: messages\\.0\\.content\\.1 is an image`));
    const audio = client.chat.completions.create({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } }] }] });
    await expect(audio).rejects.toMatchObject({ status: 400, param: 'messages.0.content.0' });
    const answer = await client.chat.completions.create({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(answer.choices[0]!.message.content).toBeTypeOf('string');
  });

  it('Anthropic messages: an image block is a 400 in Anthropic’s error shape', async () => {
    const anthropic = new Anthropic({ baseURL: `${server.url}/v1/anthropic`, apiKey: 'unused', maxRetries: 0 });
    const refused = anthropic.messages.create({
      model: CHAT_MODEL_ID,
      max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: image } }, { type: 'text', text: 'What is this?' }] }],
    });
    await expect(refused).rejects.toMatchObject({ status: 400, error: { type: 'error', error: { type: 'invalid_request_error' } } });
    await expect(refused).rejects.toThrow(/takes text only: messages\.0\.content\.0 is an image/);
  });

  it('Responses: input_image is a 400 naming the input item', async () => {
    const refused = client.responses.create({ model: CHAT_MODEL_ID, input: [{ role: 'user', content: [{ type: 'input_image', image_url: `data:image/png;base64,${image}`, detail: 'auto' }] }] });
    await expect(refused).rejects.toMatchObject({ status: 400, param: 'input.0.content.0' });
  });

  it('a private URL is never fetched for a model that cannot use it', async () => {
    // The model is checked first: no request leaves for 127.0.0.1.
    const refused = client.chat.completions.create({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://127.0.0.1:9/x.png' } }] }] });
    await expect(refused).rejects.toMatchObject({ status: 400, code: 'unsupported_input' });
  });
});

describe('a model registered with its projector, on a llama.cpp binary without the multimodal library', () => {
  const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-vl/${file}`, import.meta.url));

  // vitest.config.ts puts the suites on node-llama-cpp's prebuilt binary (LSERVE_LLAMA_BUILD=prebuilt), as a
  // platform without lserve's own addon is; chat-media-golden.test.ts asks the same model on lserve's.
  it('answers text; media are a 400 saying this build has no image input, not a silent drop', async () => {
    await server.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: 'qwen2-vl-tiny', mmproj: golden('mmproj.gguf') });
    const models = await client.models.list();
    expect(models.data.find((m) => m.id === 'qwen2-vl-tiny')).toMatchObject({ architecture: { input_modalities: ['text', 'image'] } });
    const refused = client.chat.completions.create({
      model: 'qwen2-vl-tiny',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${image}` } }, { type: 'text', text: 'Describe this image.' }] }],
    });
    await expect(refused).rejects.toMatchObject({ status: 400, code: 'no_media_runtime', param: 'messages.0.content.0' });
    await expect(refused).rejects.toThrow(/This build of lserve has no image or audio input here: .*Send text only/);
    const text = await client.chat.completions.create({ model: 'qwen2-vl-tiny', messages: [{ role: 'user', content: 'Describe a red square.' }], max_tokens: 4, temperature: 0 });
    expect(text.usage!.completion_tokens).toBeGreaterThan(0);
  }, 60_000);
});

