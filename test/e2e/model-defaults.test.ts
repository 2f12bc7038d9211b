import Anthropic from '@anthropic-ai/sdk';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyEmbeddingModel } from '../fixtures/gguf/bert.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinyQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { tinyWhisperModel, tinyWhisperTimestampedModel } from '../fixtures/onnx/whisper.js';
import { tinyQwen3File, tinyQwen3LongFile, TOKENS } from '../helpers/chat-model.js';
import { runCli } from '../helpers/cli.js';
import { connectSdk, pcm24k, silence, SPEECH_WAV, streamAudio } from '../helpers/realtime.js';
import { spawnServe } from '../helpers/serve-process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import type { ModelChoices } from '../../src/core/model-choice.js';

/**
 * One model per task, chosen once, with the models a real user collects: two
 * chat models, two speech recognisers, two voices. A standard client naming
 * none (the official SDK's realtime client, with no lserve field) gets
 * transcripts and audio from the defaults; the names OpenAI's apps hard-code
 * answer with the defaults and the responses name the real model; chat
 * names of other providers only when the operator says so.
 */

/** Registers the collection: ids not in the catalog, so the default among two is the most recent pull. */
async function collect(server: TestServer): Promise<void> {
  const store = server.engine.store;
  await store.registerLocal(tinyQwen3File(), { kind: 'chat', id: 'chat-a' });
  await store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: 'chat-b' });
  await store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-a' });
  await store.registerDirectory(await tinyWhisperTimestampedModel(), { kind: 'asr', id: 'whisper-b' });
  await store.registerDirectory(await tinyQwen3TtsModel('customvoice'), { kind: 'tts', id: 'voice-a' });
  await store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'voice-b' });
  await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'embed-a' });
  await store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: 'image-a' });
}

async function collection(models: Partial<ModelChoices> = {}): Promise<{ server: TestServer; openai: OpenAI; anthropic: Anthropic }> {
  const server = await startTestServer({ engine: { threads: 1, parallel: 2, models: { defaults: {}, aliases: {}, vendorChat: false, ...models } } });
  await collect(server);
  return { server, openai: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 }), anthropic: new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 }) };
}

const loadedAsr = (server: TestServer) => server.engine.manager.loaded().filter((m) => m.kind === 'asr').map((m) => m.id);

let plain: Awaited<ReturnType<typeof collection>>;
let speech: Buffer;

beforeAll(async () => {
  plain = await collection();
  speech = await pcm24k(SPEECH_WAV);
}, 120_000);

afterAll(async () => {
  await plain?.server.stop();
});

describe('defaults', () => {
  it('GET /v1/models marks one default per kind: the most recent pull of models the catalog does not rank', async () => {
    const list = (await (await fetch(`${plain.server.url}/v1/models`)).json()) as { data: Array<{ id: string; kind: string; default?: boolean }>; aliases: Array<{ alias: string; model: string }> };
    const defaults = Object.fromEntries(list.data.filter((m) => m.default).map((m) => [m.kind, m.id]));
    expect(defaults).toMatchObject({ chat: 'chat-b', asr: 'whisper-b', tts: 'voice-b', embedding: 'embed-a', image: 'image-a' });
    expect(list.aliases).toContainEqual({ alias: 'whisper-1', model: 'whisper-b' });
    // Two chat models, no --alias-vendor-chat: other providers' chat names stand for nothing.
    expect(list.aliases.some((a) => a.alias.startsWith('gpt-*'))).toBe(false);
  });

  it('a realtime session from the official SDK, with no lserve field, is transcribed and answered in audio by the defaults', async () => {
    const { rt, events, next } = await connectSdk(plain.openai, 'chat-a');
    rt.send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 8 } });
    await next('session.updated');
    streamAudio(rt, Buffer.concat([silence(0.3), speech, silence(1.5)]));
    await next('conversation.item.input_audio_transcription.completed');
    await next('response.done');
    rt.close();
    expect(events.filter((e) => e.type === 'error' || e.type === 'conversation.item.input_audio_transcription.failed')).toEqual([]);
    expect(events.some((e) => e.type === 'response.output_audio.delta')).toBe(true);
    expect(loadedAsr(plain.server)).toEqual(['whisper-b']);
  }, 120_000);

  it('a session naming its transcription model gets that one; --default-model changes the pick', async () => {
    const chosen = await collection({ defaults: { asr: 'whisper-a' } });
    try {
      expect(await chosen.server.engine.defaultModel('asr')).toBe('whisper-a');
      const { rt, next } = await connectSdk(chosen.openai, 'chat-a');
      rt.send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 4, output_modalities: ['text'], audio: { input: { transcription: { model: 'whisper-b' } } } } });
      await next('session.updated');
      streamAudio(rt, Buffer.concat([silence(0.3), speech, silence(1.5)]));
      await next('conversation.item.input_audio_transcription.completed');
      rt.close();
      expect(loadedAsr(chosen.server)).toEqual(['whisper-b']);
      // Without a name, the chosen default.
      const text = await chosen.openai.audio.transcriptions.create({ file: await toFile(readFileSync(SPEECH_WAV), 'speech.wav'), model: 'whisper-1' });
      expect(typeof text.text).toBe('string');
      expect(loadedAsr(chosen.server).sort()).toEqual(['whisper-a', 'whisper-b']);
    } finally {
      await chosen.server.stop();
    }
  }, 120_000);
});

describe("the names OpenAI's apps hard-code", () => {
  it('whisper-1, tts-1, gpt-4o-mini-tts, text-embedding-3-small and gpt-image-1 answer with the defaults, naming the real model where the response has one', async () => {
    const { openai } = plain;
    const text = await openai.audio.transcriptions.create({ file: await toFile(readFileSync(SPEECH_WAV), 'speech.wav'), model: 'whisper-1' });
    expect(typeof text.text).toBe('string');
    for (const model of ['tts-1', 'gpt-4o-mini-tts']) {
      const audio = await openai.audio.speech.create({ model, voice: 'alloy', input: 'Hello.', response_format: 'wav' });
      expect(Buffer.from(await audio.arrayBuffer()).subarray(0, 4).toString()).toBe('RIFF');
    }
    const embedded = await openai.embeddings.create({ model: 'text-embedding-3-small', input: 'hello' });
    expect(embedded.model).toBe('embed-a');
    const image = await openai.images.generate({ model: 'gpt-image-1', prompt: 'a red square', size: '64x64', response_format: 'b64_json' } as OpenAI.ImageGenerateParamsNonStreaming);
    expect(image.data?.[0]?.b64_json).toBeTruthy();
    // A diarization model is a 400 that says so.
    await expect(openai.audio.transcriptions.create({ file: await toFile(readFileSync(SPEECH_WAV), 'speech.wav'), model: 'gpt-4o-transcribe-diarize' })).rejects.toMatchObject({ status: 400 });
  }, 120_000);

  it("gpt-4o-mini and claude-* are 404s naming --alias-vendor-chat while several chat models are installed, and answer when it is on", async () => {
    await expect(plain.openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 })).rejects.toMatchObject({
      status: 404,
      message: expect.stringContaining('--alias-vendor-chat'),
    });
    await expect(plain.anthropic.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] })).rejects.toMatchObject({
      status: 404,
      error: { error: { type: 'not_found_error', message: expect.stringContaining('--alias-vendor-chat') } },
    });
    const vendor = await collection({ vendorChat: true, defaults: { chat: 'chat-a' } });
    try {
      const chat = await vendor.openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, logit_bias: { [TOKENS.imEnd]: 100 } });
      expect(chat.model).toBe('chat-a');
      const streamed = await vendor.openai.chat.completions.create({ model: 'gpt-5', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, stream: true });
      for await (const chunk of streamed) expect(chunk.model).toBe('chat-a');
      const message = await vendor.anthropic.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
      expect(message.model).toBe('chat-a');
      const response = await vendor.openai.responses.create({ model: 'o4-mini', input: 'hi', max_output_tokens: 1 });
      expect(response.model).toBe('chat-a');
    } finally {
      await vendor.server.stop();
    }
  }, 120_000);

  it('an --alias names any model; a name whose kind has nothing installed says what to pull', async () => {
    const aliased = await collection({ aliases: { 'my-writer': 'chat-a' } });
    try {
      const chat = await aliased.openai.chat.completions.create({ model: 'my-writer', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
      expect(chat.model).toBe('chat-a');
    } finally {
      await aliased.server.stop();
    }
    const empty = await startTestServer();
    try {
      const res = await fetch(`${empty.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'text-embedding-3-small', input: 'x' }) });
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/'text-embedding-3-small' stands for the default embedding model.*lserve pull bge-small-en-v1.5/);
    } finally {
      await empty.stop();
    }
  });
});

describe('the CLI', () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'lserve-defaults-'));
  const env = { LSERVE_HOME: home };
  afterAll(() => rmSync(home, { recursive: true, force: true }));

  beforeAll(async () => {
    for (const [source, kind, id] of [
      [await tinyWhisperModel(), 'asr', 'whisper-a'],
      [await tinyWhisperTimestampedModel(), 'asr', 'whisper-b'],
    ] as const) {
      expect((await runCli(['pull', source, '--kind', kind, '--id', id, '--quiet'], { env })).code).toBe(0);
    }
  }, 120_000);

  it('lserve list marks each kind\'s default; --default-model moves the mark', async () => {
    const list = await runCli(['list'], { env });
    expect(list.stdout).toMatch(/^whisper-b \*/m);
    expect(list.stdout).toMatch(/^whisper-a\s/m);
    expect(list.stdout).toContain('* the default of its kind');
    const chosen = await runCli(['list', '--json', '--default-model', 'asr=whisper-a'], { env });
    const rows = JSON.parse(chosen.stdout) as Array<{ id: string; default?: boolean }>;
    expect(rows.filter((r) => r.default).map((r) => r.id).sort()).toEqual(['ppocr-v4-mobile', 'whisper-a']);
  });

  it('a command without -m uses the default and, with --verbose, says which', async () => {
    const result = await runCli(['--verbose', 'transcribe', SPEECH_WAV, '--default-model', 'asr=whisper-a'], { env, timeoutMs: 120_000 });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain('using whisper-a, the default speech recognition model');
    const env2 = { ...env, LSERVE_DEFAULT_MODEL_ASR: 'whisper-b' };
    const viaEnv = await runCli(['--verbose', 'transcribe', SPEECH_WAV], { env: env2, timeoutMs: 120_000 });
    expect(viaEnv.stderr).toContain('using whisper-b');
  }, 240_000);

  it('lserve serve logs the defaults it will use once, at start', async () => {
    const served = await spawnServe(home, ['--default-model', 'tts=piper-en-lessac']);
    try {
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(served.log()).toContain('defaults: asr=whisper-b (2 installed; --default-model asr=… to choose)');
      expect(served.log()).toContain('defaults: --default-model tts=piper-en-lessac names no installed tts model');
    } finally {
      served.child.kill('SIGTERM');
      await served.exited;
    }
  }, 60_000);
});
