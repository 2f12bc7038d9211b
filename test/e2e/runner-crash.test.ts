import { readFile } from 'node:fs/promises';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningModelList } from '../../src/api/ps.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * A native fault takes down one runner, never the server: each model runs in
 * a runner process of its own, here killed with SIGKILL in the middle of a
 * streamed chat, a transcription and an image generation. Each request gets
 * a shaped 500 naming its model, the server keeps serving, the death is
 * logged once and counted in /metrics, and the next request to the model
 * starts a new runner and succeeds.
 */

const SPEECH = new URL('../fixtures/audio/speech.wav', import.meta.url);
let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1, parallel: 2 }, server: { metrics: true } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
  await server.engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: 'sd-test' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
});

/** The pid of the runner holding `model` (GET /v1/ps), once it is loaded. */
async function runnerPid(model: string): Promise<number> {
  for (let i = 0; i < 600; i++) {
    const { models } = (await (await fetch(`${server.url}/v1/ps`)).json()) as RunningModelList;
    const pid = models.find((m) => m.id === model)?.pid;
    if (pid) return pid;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`${model} never showed up loaded in /v1/ps`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The error body of a failed request, checked to be a shaped 500 that names the model. */
function expectRunnerError(status: number, body: unknown, model: string): void {
  expect(status).toBe(500);
  const error = (body as { error: Record<string, unknown> }).error;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(error).toMatchObject({ type: 'server_error', code: 'runner_crashed' });
  expect(error.message).toContain(`Model '${model}'`);
  expect(error.message).toMatch(/runner process was killed \(SIGKILL\)/);
}

async function restarts(model: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('lserve_child_process_restarts_total') && l.includes(`runner ${model}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('a runner killed in the middle of a request', () => {
  it('fails a streamed chat with an error event naming the model; the next chat succeeds in a new runner', async () => {
    const stream = await client.chat.completions.create({
      model: CHAT_MODEL_ID,
      messages: [{ role: 'user', content: 'count' }],
      max_tokens: 100_000,
      logit_bias: NEVER_END,
      stream: true,
    });
    const pid = await runnerPid(CHAT_MODEL_ID);
    let chunks = 0;
    let failure: unknown;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content && ++chunks === 3) process.kill(pid, 'SIGKILL');
      }
    } catch (error) {
      failure = error;
    }
    expect(chunks).toBeGreaterThanOrEqual(3);
    // The stream had started (200, SSE): the error arrives as an SSE error event, which the SDK raises.
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect(String((failure as Error).message)).toMatch(new RegExp(`Model '${CHAT_MODEL_ID}' stopped while serving this request: its runner process was killed \\(SIGKILL\\)`));
    expect(alive(pid)).toBe(false);

    const next = await client.chat.completions.create({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect(next.choices[0]!.message.content).toEqual(expect.any(String));
    expect(await runnerPid(CHAT_MODEL_ID)).not.toBe(pid);
    expect(await restarts(CHAT_MODEL_ID)).toBe(1);
    const said = server.logs.filter((line) => line.startsWith(`the runner of ${CHAT_MODEL_ID} (pid ${pid}) was killed (SIGKILL)`));
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/1 request in flight failed; it is started again on the next request/);
  });

  it('fails a transcription with a 500 naming the model; the next transcription succeeds', async () => {
    const audio = await readFile(SPEECH);
    const upload = () => {
      const form = new FormData();
      form.set('file', new Blob([audio], { type: 'audio/wav' }), 'speech.wav');
      form.set('model', 'whisper-test');
      return fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
    };
    const pending = upload();
    const pid = await runnerPid('whisper-test');
    // The synthetic Whisper decodes to its token limit: seconds of work to cut into.
    await new Promise((resolve) => setTimeout(resolve, 300));
    process.kill(pid, 'SIGKILL');
    const res = await pending;
    expectRunnerError(res.status, await res.json(), 'whisper-test');

    const next = await client.audio.transcriptions.create({ model: 'whisper-test', file: await toFile(audio, 'speech.wav') });
    expect(next.text).toEqual(expect.any(String));
    expect(await runnerPid('whisper-test')).not.toBe(pid);
  });

  it('fails an image generation with an error event naming the model; the next generation succeeds', async () => {
    // Streamed, so that the kill lands between two denoising steps: after the first progress event.
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sd-test', prompt: 'a red fox', size: '256x256', steps: 4, n: 4, stream: true }),
    });
    expect(res.status).toBe(200);
    const pid = await runnerPid('sd-test');
    const events: Array<{ type: string; error?: Record<string, unknown> }> = [];
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const chunk of res.body!) {
      buffered += decoder.decode(chunk as Uint8Array, { stream: true });
      for (let end = buffered.indexOf('\n\n'); end >= 0; end = buffered.indexOf('\n\n')) {
        const data = /^data: (.*)$/m.exec(buffered.slice(0, end))?.[1];
        buffered = buffered.slice(end + 2);
        if (!data) continue;
        events.push(JSON.parse(data));
        if (events.length === 1) process.kill(pid, 'SIGKILL');
      }
    }
    expect(events[0]!.type).toBe('image_generation.progress');
    const failure = events.at(-1)!;
    expect(failure.type).toBe('error');
    expectRunnerError(500, { error: failure.error }, 'sd-test');

    const next = await client.images.generate({ model: 'sd-test', prompt: 'a red fox', size: '256x256', response_format: 'b64_json' });
    expect(next.data?.[0]?.b64_json).toEqual(expect.any(String));
    expect(await runnerPid('sd-test')).not.toBe(pid);
  });

  it('kept the server up and serving throughout', async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const { models } = (await (await fetch(`${server.url}/v1/ps`)).json()) as RunningModelList;
    for (const model of models) expect(alive(model.pid!)).toBe(true);
  });
});
