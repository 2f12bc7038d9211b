import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { shippedAddonFor } from '../../src/runtimes/llama/shipped-addon.js';
import { addonSources } from '../../src/runtimes/llama/threadpool-addon.js';

/**
 * Images in chat, proven against transformers: the tiny random-weight
 * Qwen2-VL of test/golden/qwen2-vl (README.md there: how it was made, and
 * that llama.cpp's own server reproduces it) asked through lserve's server
 * with the official SDKs. Greedy, so every one of the 12 tokens must be the
 * reference's (each step leads its runner-up by ≥ 0.199 nats); the prompt
 * must count what llama.cpp counts (one token per image embedding).
 *
 * llama.cpp's multimodal library comes with lserve's own binary, the
 * threadpool addon shipped for linux-x64 (vitest.config.ts puts every other
 * suite on node-llama-cpp's prebuilt one); elsewhere these tests are skipped.
 */

const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-vl/${file}`, import.meta.url));

interface Case {
  image: string;
  prompt: string;
  prompt_ids: number[];
  tokens: number[];
  text: string;
}
const reference = JSON.parse(readFileSync(golden('reference.json'), 'utf8')) as { cases: Case[] };
const SYSTEM = 'You are a helpful assistant.';
const IMAGE_PAD = 151655;
const MODEL = 'qwen2-vl-tiny';

const sources = addonSources();
const shipped = sources !== undefined && process.platform === 'linux' && shippedAddonFor(sources) !== undefined;
let server: TestServer;
let client: OpenAI;
const savedBuild = process.env.LSERVE_LLAMA_BUILD;

const dataUri = (c: Case) => `data:image/png;base64,${readFileSync(golden(c.image)).toString('base64')}`;

function ask(c: Case, stream = false) {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: [{ type: 'image_url', image_url: { url: dataUri(c) } }, { type: 'text', text: c.prompt }] },
  ];
  const common = { model: MODEL, messages, temperature: 0, max_tokens: c.tokens.length };
  return stream ? client.chat.completions.create({ ...common, stream: true, stream_options: { include_usage: true } }) : client.chat.completions.create(common);
}

beforeAll(async () => {
  if (!shipped) return;
  process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // read by the runner processes the server starts
  // 4096 tokens a sequence (an explicit size is shared by a model's sequences when, as here, each has a cache of its own).
  server = await startTestServer({ engine: { threads: 1, parallel: 2, contextSizes: { models: { [MODEL]: 8192 } } } });
  await server.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: MODEL, mmproj: golden('mmproj.gguf') });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  process.env.LSERVE_LLAMA_BUILD = savedBuild;
});

describe.skipIf(!shipped)('Qwen2-VL golden model, images through the server (needs the linux-x64 addon)', () => {
  it("reproduces transformers' greedy tokens for every case, in an order that reuses and replaces images", async () => {
    for (const index of [0, 1, 1, 2, 3, 0, 3]) {
      const c = reference.cases[index]!;
      const answer = (await ask(c)) as OpenAI.ChatCompletion;
      expect({ index, content: answer.choices[0]!.message.content }).toEqual({ index, content: c.text });
      expect(answer.usage).toMatchObject({ prompt_tokens: c.prompt_ids.length, completion_tokens: c.tokens.length });
    }
  }, 120_000);

  it('counts the image as part of the cached prefix: the same bytes are reused, another image is not', async () => {
    const [first, sameImage, otherImage] = [reference.cases[0]!, reference.cases[1]!, reference.cases[2]!];
    expect(sameImage.image).toBe(first.image);
    expect(otherImage.image).not.toBe(first.image);
    const beforeImage = first.prompt_ids.indexOf(IMAGE_PAD);
    const imageTokens = first.prompt_ids.filter((t) => t === IMAGE_PAD).length;
    await ask(first);
    // A follow-up question about the same picture: the image's cells come from the cache, not a second encode.
    const follow = (await ask(sameImage)) as OpenAI.ChatCompletion;
    expect(follow.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(beforeImage + imageTokens);
    expect(follow.choices[0]!.message.content).toBe(sameImage.text);
    // The same words about another picture share only what comes before it.
    const other = (await ask(otherImage)) as OpenAI.ChatCompletion;
    expect(other.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(other.usage!.prompt_tokens_details!.cached_tokens).toBeLessThanOrEqual(beforeImage);
    expect(other.choices[0]!.message.content).toBe(otherImage.text);
  }, 60_000);

  it('streams the same answer', async () => {
    const c = reference.cases[3]!;
    let content = '';
    let promptTokens = 0;
    for await (const chunk of (await ask(c, true)) as AsyncIterable<OpenAI.ChatCompletionChunk>) {
      content += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) promptTokens = chunk.usage.prompt_tokens;
    }
    expect(content).toBe(c.text);
    expect(promptTokens).toBe(c.prompt_ids.length);
  }, 60_000);

  // Two sequences sampled at the same moment used to read each other's logits after a batch llama.cpp had reordered (see
  // runtimes/llama/output-reorder.ts), in a few percent of such pairs: asked after each cache state, three times.
  it('answers image requests side by side with each other and with a text request, each as it would alone', async () => {
    const text = () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Describe a red square.' }], temperature: 0, max_tokens: 16 });
    const alone = (await text()).choices[0]!.message.content;
    for (const cached of [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]) {
      await ask(reference.cases[cached]!);
      const [a, b, t] = await Promise.all([ask(reference.cases[2]!), ask(reference.cases[1]!), text()]);
      const answers = [a, b, t].map((answer) => (answer as OpenAI.ChatCompletion).choices[0]!.message.content);
      expect({ cached, answers }).toEqual({ cached, answers: [reference.cases[2]!.text, reference.cases[1]!.text, alone] });
    }
  }, 60_000);

  it('the Anthropic SDK sends an image block and gets the same answer', async () => {
    const c = reference.cases[2]!;
    const anthropic = new Anthropic({ baseURL: `${server.url}/v1/anthropic`, apiKey: 'unused', maxRetries: 0 });
    // Greedy; this SDK version's types have no temperature, the Messages API and lserve do.
    const greedy = { temperature: 0 };
    const message = await anthropic.messages.create({
      model: MODEL,
      system: SYSTEM,
      max_tokens: c.tokens.length,
      ...greedy,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: readFileSync(golden(c.image)).toString('base64') } }, { type: 'text', text: c.prompt }] }],
    });
    expect(message.content).toEqual([expect.objectContaining({ type: 'text', text: c.text })]);
    expect(message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0)).toBe(c.prompt_ids.length);
  }, 60_000);

  it('takes images of any shape the decoder lets through, and media it cannot use are a 400, the server serving on', async () => {
    const png = async (width: number, height: number, channels: 3 | 4) =>
      `data:image/png;base64,${(await sharp({ create: { width, height, channels, background: '#3366cc80' } }).png().toBuffer()).toString('base64')}`;
    const user = (part: OpenAI.ChatCompletionContentPart) => [{ role: 'user' as const, content: [part, { type: 'text' as const, text: 'What?' }] }];
    for (const [width, height, channels] of [[1, 1, 3], [1, 3000, 3], [3000, 1, 3], [50, 50, 4]] as const) {
      const answer = await client.chat.completions.create({ model: MODEL, messages: user({ type: 'image_url', image_url: { url: await png(width, height, channels) } }), max_tokens: 2, temperature: 0 });
      expect({ width, height, tokens: answer.usage!.completion_tokens }).toEqual({ width, height, tokens: 2 });
    }
    // An image too large for this model's 4096-token context is the context error, before anything is decoded.
    const huge = client.chat.completions.create({ model: MODEL, messages: user({ type: 'image_url', image_url: { url: await png(2000, 2000, 3) } }), max_tokens: 2 });
    await expect(huge).rejects.toMatchObject({ status: 400, code: 'context_length_exceeded' });
    const audio = client.chat.completions.create({ model: MODEL, messages: user({ type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } }), max_tokens: 2 });
    await expect(audio).rejects.toMatchObject({ status: 400, code: 'unsupported_input', param: 'messages.0.content.0' });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  }, 60_000);

  it('an image that does not decode is a 400 invalid_image naming its part, in each API, quoting none of its bytes', async () => {
    const secret = 'lserve-private-marker-7f3a';
    const garbage = Buffer.from(`${secret} `.repeat(40));
    const truncated = readFileSync(golden(reference.cases[0]!.image)).subarray(0, 120);
    for (const [bytes, type] of [[garbage, 'image/png'], [truncated, 'image/png'], [garbage, 'image/jpeg']] as const) {
      const url = `data:${type};base64,${bytes.toString('base64')}`;
      const failure = (await client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'What?' }, { type: 'image_url', image_url: { url } }] }], max_tokens: 2 })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
      expect(failure).toMatchObject({ status: 400, type: 'invalid_request_error', code: 'invalid_image', param: 'messages.0.content.1' });
      expect(failure.message).not.toContain(secret);
      expect(failure.message).not.toContain(bytes.subarray(0, 16).toString('base64'));
    }
    const anthropic = new Anthropic({ baseURL: `${server.url}/v1/anthropic`, apiKey: 'unused', maxRetries: 0 });
    const refused = (await anthropic.messages
      .create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: garbage.toString('base64') } }] }] })
      .catch((e: unknown) => e)) as InstanceType<typeof Anthropic.BadRequestError>;
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    expect(refused.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(JSON.stringify(refused.error)).not.toContain(secret);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  }, 60_000);

  it('`lserve run --image` prints the same answer', async () => {
    const c = reference.cases[0]!;
    const res = await runCli(['--home', server.home, 'run', MODEL, c.prompt, '--image', golden(c.image), '--system', SYSTEM, '--temperature', '0', '--max-tokens', String(c.tokens.length), '--threads', '1'], {
      env: { LSERVE_LLAMA_BUILD: 'threadpool' },
    });
    expect(res.stderr).toBe('');
    expect(res.stdout).toBe(`${c.text}\n`);
  }, 60_000);

  it('the Responses API takes input_image', async () => {
    const c = reference.cases[1]!;
    const response = await client.responses.create({
      model: MODEL,
      instructions: SYSTEM,
      temperature: 0,
      max_output_tokens: c.tokens.length,
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: dataUri(c), detail: 'auto' }, { type: 'input_text', text: c.prompt }] }],
    });
    expect(response.output_text).toBe(c.text);
  }, 60_000);
});

describe.skipIf(!shipped)("Qwen2-VL golden model, the projector's image embeddings (needs the linux-x64 addon)", () => {
  it("agree with transformers' within 2e-3 relative L2 distance per image, as llama.cpp's own (1.1e-3 and 1.3e-3)", async () => {
    const [{ mkdtemp, rm }, os, path, { decodeChatMedia }, runtime, { MediaProjector }] = await Promise.all([
      import('node:fs/promises'),
      import('node:os'),
      import('node:path'),
      import('../../src/core/tasks/chat-media.js'),
      import('../../src/runtimes/llama/runtime.js'),
      import('../../src/runtimes/llama/mtmd.js'),
    ]);
    const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-mtmd-'));
    process.env.LSERVE_LLAMA_BUILD = 'threadpool';
    runtime.setLlamaAddonHome(home);
    const model = await runtime.loadGguf(golden('model.gguf'));
    try {
      const projector = (await MediaProjector.load(model, golden('mmproj.gguf'), 1))!;
      expect([...projector.takes]).toEqual(['image']);
      const { images } = JSON.parse(readFileSync(golden('reference.json'), 'utf8')) as { images: Array<{ file: string; tokens: number; embeddings: { values: number[][] } }> };
      for (const image of images) {
        const item = { kind: 'image' as const, param: image.file, source: { bytes: readFileSync(golden(image.file)) } };
        await decodeChatMedia(item, item.source.bytes);
        const [embeddings] = await projector.embeddings(item);
        const expected = image.embeddings.values.flat();
        expect(embeddings!.length).toBe(expected.length);
        let difference = 0;
        let norm = 0;
        expected.forEach((value, i) => {
          difference += (embeddings![i]! - value) ** 2;
          norm += value ** 2;
        });
        expect(Math.sqrt(difference / norm)).toBeLessThan(2e-3);
      }
      await projector.dispose();
    } finally {
      await model.dispose();
      await rm(home, { recursive: true, force: true });
    }
  }, 60_000);
});

describe.skipIf(!shipped)('Qwen2-Audio golden model, audio through the server (needs the linux-x64 addon)', () => {
  // test/golden/qwen2-audio/README.md: a tiny random Qwen2-Audio, llama.cpp's own server reproduces it.
  const audioGolden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-audio/${file}`, import.meta.url));
  const audioReference = JSON.parse(readFileSync(audioGolden('reference.json'), 'utf8')) as { cases: Array<Case & { audio: string }> };

  it("answers input_audio parts with transformers' greedy tokens, counting one prompt token per audio embedding", async () => {
    await server.engine.store.registerLocal(audioGolden('model.gguf'), { kind: 'chat', id: 'qwen2-audio-tiny', mmproj: audioGolden('mmproj.gguf') });
    const models = await client.models.list();
    expect(models.data.find((m) => m.id === 'qwen2-audio-tiny')).toMatchObject({ architecture: { input_modalities: ['text', 'audio'] } });
    for (const c of audioReference.cases) {
      const data = readFileSync(audioGolden(c.audio)).toString('base64');
      const answer = await client.chat.completions.create({
        model: 'qwen2-audio-tiny',
        temperature: 0,
        max_tokens: c.tokens.length,
        messages: [
          { role: 'system', content: SYSTEM },
          { role: 'user', content: [{ type: 'input_audio', input_audio: { data, format: 'wav' } }, { type: 'text', text: c.prompt }] },
        ],
      });
      expect({ prompt: c.prompt, content: answer.choices[0]!.message.content }).toEqual({ prompt: c.prompt, content: c.text });
      expect(answer.usage!.prompt_tokens).toBe(c.prompt_ids.length);
    }
    // An image for this audio-only model is refused at its part.
    const image = client.chat.completions.create({ model: 'qwen2-audio-tiny', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUri(reference.cases[0]!) } }] }] });
    await expect(image).rejects.toMatchObject({ status: 400, code: 'unsupported_input', param: 'messages.0.content.0' });
    // And a clip that does not decode is a 400 invalid_audio at its part, quoting none of it.
    const secret = 'lserve-private-marker-7f3a';
    for (const [data, format] of [[Buffer.from(`RIFF....WAVE${secret}`).toString('base64'), 'wav'], [Buffer.from(secret.repeat(20)).toString('base64'), 'mp3']] as const) {
      const failure = (await client.chat.completions
        .create({ model: 'qwen2-audio-tiny', messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data, format } }, { type: 'text', text: 'What?' }] }], max_tokens: 2 })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
      expect(failure).toMatchObject({ status: 400, code: 'invalid_audio', param: 'messages.0.content.0' });
      expect(failure.message).not.toContain(secret);
    }
  }, 120_000);
});
