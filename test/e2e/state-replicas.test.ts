import { rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinyQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { runCli } from '../helpers/cli.js';
import { postgresAvailable, startPostgres, type TestPostgres } from '../helpers/postgres.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';
import { startTestServer, tempHome, type TestServer } from '../helpers/server.js';

/**
 * Two lserve servers sharing one state store, as replicas behind a
 * round-robin load balancer: each with its own home and `--database-url`
 * on one PostgreSQL database where a server can be had, else two processes
 * on one home (one SQLite file). A speech stream job POSTed to one is
 * streamed by the other (the model loaded there, a cloned voice's reference
 * audio carried along), and a conversation started on one continues on the
 * other. Server A runs in this process, B is `lserve serve` as a user runs it.
 */

const REFERENCE = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));
const TEXT = 'The quick brown fox jumps over the lazy dog. Then it rests in the sun for a while.';
const MODELS: Array<[id: string, kind: string, source: () => Promise<string>]> = [
  ['piper-test', 'tts', () => syntheticPiperVoice()],
  ['qwen-clone', 'tts', () => tinyQwen3TtsModel('base')],
  [CHAT_MODEL_ID, 'chat', async () => tinyQwen3File()],
];

let postgres: TestPostgres | undefined;
let a: TestServer;
let b: ServeProcess;
let homeB: string | undefined;

beforeAll(async () => {
  postgres = postgresAvailable ? await startPostgres() : undefined;
  const databaseUrl = await postgres?.createDatabase();
  // Only A may read the reference audio's directory: a job B serves must carry the bytes, not the path.
  a = await startTestServer({ engine: { threads: 1 }, server: { databaseUrl, allowLocalFiles: [dirname(REFERENCE)] } });
  homeB = databaseUrl ? await tempHome() : undefined;
  for (const [id, kind, source] of MODELS) {
    const dir = await source();
    if (kind === 'chat') await a.engine.store.registerLocal(dir, { kind: 'chat', id });
    else await a.engine.store.registerDirectory(dir, { kind: 'tts', id });
    if (homeB) {
      const pulled = await runCli(['pull', dir, '--kind', kind, '--id', id, '--quiet'], { env: { LSERVE_HOME: homeB } });
      expect(pulled.code, pulled.stderr).toBe(0);
    }
  }
  b = await spawnServe(homeB ?? a.home, ['--threads', '1', ...(databaseUrl ? ['--database-url', databaseUrl] : [])]);
}, 180_000);

afterAll(async () => {
  b?.child.kill('SIGKILL');
  await b?.exited;
  await a?.stop();
  if (homeB) await rm(homeB, { recursive: true, force: true });
  await postgres?.close();
});

const post = (url: string, body: unknown) => fetch(`${url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function streamUrl(url: string, body: Record<string, unknown>): Promise<string> {
  const res = await post(url, { ...body, stream: true });
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as { stream_url: string }).stream_url;
}

describe(`two servers on one ${postgresAvailable ? 'PostgreSQL database' : 'SQLite file'}`, () => {
  it('a stream job POSTed to one streams from the other, once', async () => {
    const job = await streamUrl(a.url, { model: 'piper-test', input: TEXT });
    const audio = await fetch(`${b.url}${job}`);
    expect(audio.status, await audio.clone().text()).toBe(200);
    expect(audio.headers.get('content-type')).toBe('audio/wav');
    expect(audio.headers.get('transfer-encoding')).toBe('chunked');
    const streamed = await decodeAudio(new Uint8Array(await audio.arrayBuffer()), { sampleRate: 22_050 });
    const { duration } = (await (await post(a.url, { model: 'piper-test', input: TEXT })).json()) as { duration: number };
    expect(streamed.duration).toBeCloseTo(duration, 2);
    for (const server of [a.url, b.url]) {
      const again = await fetch(`${server}${job}`);
      expect(again.status).toBe(404);
      expect(((await again.json()) as { error: { code: string } }).error.code).toBe('stream_not_found');
    }
  });

  it("a voice clone job streams from the other server with the reference audio it was given, which that server could not read", async () => {
    const request = { model: 'qwen-clone', input: 'Words in a borrowed voice.', ref_audio: REFERENCE, seed: 7, response_format: 'pcm' };
    const refused = await post(b.url, request);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('local_files_forbidden');

    const direct = Buffer.from(await (await post(a.url, request)).arrayBuffer());
    const audio = await fetch(`${b.url}${await streamUrl(a.url, request)}`);
    expect(audio.status).toBe(200);
    const streamed = Buffer.from(await audio.arrayBuffer());
    expect(streamed.length).toBeGreaterThan(0);
    // The same seed and reference: the same samples as the one-shot synthesis on A.
    expect(streamed.equals(direct)).toBe(true);
  });

  it('a conversation started on one continues on the other, and either reads, pages and deletes what the other stored', async () => {
    const client = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const base = { model: CHAT_MODEL_ID, temperature: 0, max_output_tokens: 2 } as const;
    const one = await client(a.url).responses.create({ ...base, input: 'My name is Ada and I live in Paris.' });
    const two = await client(b.url).responses.create({ ...base, input: 'What is my name?', previous_response_id: one.id });
    const alone = await client(b.url).responses.create({ ...base, input: 'What is my name?', store: false });
    // The earlier turn (input and answer) was read from the shared store and put before the question.
    expect(two.usage!.input_tokens).toBeGreaterThan(alone.usage!.input_tokens + 8);

    const fetched = await client(a.url).responses.retrieve(two.id);
    expect(fetched).toMatchObject({ id: two.id, previous_response_id: one.id });
    const items = await client(a.url).responses.inputItems.list(two.id);
    expect(items.data.map((item) => (item.type === 'message' ? item.content : []))).toEqual([[{ type: 'input_text', text: 'What is my name?' }]]);
    await client(a.url).responses.delete(one.id);
    const gone = await fetch(`${b.url}/v1/responses/${one.id}`);
    expect(gone.status).toBe(404);
  });

  it.runIf(postgresAvailable)('while the database is down, what needs it answers 503 with Retry-After, the rest works, and nothing crashes', async ({ skip }) => {
    if (!postgres?.stop) skip('the server of LSERVE_TEST_DATABASE_URL is not ours to stop');
    const stored = (await (await fetch(`${a.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: CHAT_MODEL_ID, input: 'Hi', max_output_tokens: 1 }) })).json()) as { id: string };
    const job = await streamUrl(a.url, { model: 'piper-test', input: 'Kept for later.' });
    await postgres!.stop!();
    try {
      for (const server of [a.url, b.url]) {
        const requests: Array<[string, Promise<Response>]> = [
          ['get', fetch(`${server}/v1/responses/${stored.id}`)],
          ['continue', fetch(`${server}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: CHAT_MODEL_ID, input: 'And?', previous_response_id: stored.id }) })],
          ['stream job', post(server, { model: 'piper-test', input: 'Not now.', stream: true })],
          ['claim', fetch(`${server}${job}`)],
        ];
        for (const [name, request] of requests) {
          const res = await request;
          expect(res.status, `${server} ${name}`).toBe(503);
          expect(res.headers.get('retry-after'), name).toBe('2');
          expect(((await res.json()) as { error: unknown }).error, name).toMatchObject({ type: 'server_error', code: 'database_unavailable', param: null });
        }
        // What needs no stored state goes on.
        const unstored = await fetch(`${server}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: CHAT_MODEL_ID, input: 'Hi', max_output_tokens: 1, store: false }) });
        expect(unstored.status).toBe(200);
        expect((await post(server, { model: 'piper-test', input: 'Said at once.' })).status).toBe(200);
        // A balancer takes the replica out of rotation meanwhile; /health, liveness, stays 200.
        const ready = await fetch(`${server}/ready`);
        expect({ status: ready.status, checks: ((await ready.json()) as { checks: unknown }).checks }).toEqual({ status: 503, checks: { model_store: 'ok', database: 'failed' } });
        expect((await fetch(`${server}/health`)).status).toBe(200);
      }
    } finally {
      await postgres!.start!();
    }
    expect((await fetch(`${b.url}/v1/responses/${stored.id}`)).status).toBe(200);
    expect((await fetch(`${b.url}${job}`)).status).toBe(200);
    expect((await fetch(`${b.url}/ready`)).status).toBe(200);
    expect(b.log()).toMatch(/state database is unreachable[\s\S]*state database is reachable again/);
    // Each 503 is logged with its cause, as every 5xx is: the refused connection, nothing else.
    const errors = a.logs.filter((line) => line.startsWith('error'));
    expect(errors.length).toBeGreaterThan(0);
    for (const line of errors) expect(line).toMatch(/^error \S+ \S+: Error: connect ECONNREFUSED/);
  });
});
