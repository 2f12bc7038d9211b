import { rm } from 'node:fs/promises';
import path from 'node:path';
import Database from 'better-sqlite3';
import OpenAI from 'openai';
import type { Response, ResponseCreateParamsStreaming, ResponseStreamEvent } from 'openai/resources/responses/responses';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { runCli } from '../helpers/cli.js';
import { tempHome } from '../helpers/server.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';

/**
 * Stored responses outlive the server: a conversation continues after a
 * restart on the same home, and a server killed (SIGKILL) while streaming and
 * storing responses leaves a readable database in which each response is
 * whole or absent, and every response whose final event reached the client is
 * kept (the route commits the write before it sends that event).
 */

let home: string;
const running = new Set<ServeProcess>();

beforeAll(async () => {
  home = await tempHome();
  const pulled = await runCli(['pull', tinyQwen3File(), '--kind', 'chat', '--id', CHAT_MODEL_ID], { env: { LSERVE_HOME: home } });
  expect(pulled.code, pulled.stderr).toBe(0);
});

afterEach(() => {
  for (const server of running) server.child.kill('SIGKILL');
  running.clear();
});

afterAll(async () => {
  if (home) await rm(home, { recursive: true, force: true });
});

async function serve(): Promise<{ server: ServeProcess; client: OpenAI }> {
  const server = await spawnServe(home, ['--threads', '1', '--parallel', '4']);
  running.add(server);
  return { server, client: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

async function stop(server: ServeProcess, signal: 'SIGTERM' | 'SIGKILL'): Promise<number | null> {
  server.child.kill(signal);
  const code = await server.exited;
  running.delete(server);
  return code;
}

/** The text of a response's message items. */
const textOf = (response: Pick<Response, 'output'>) =>
  response.output.flatMap((item) => (item.type === 'message' ? item.content : [])).map((part) => (part.type === 'output_text' ? part.text : '')).join('');

const base = { model: CHAT_MODEL_ID, temperature: 0 } as const;

it('continues a stored conversation after the server restarts on the same home', async () => {
  const first = await serve();
  const one = await first.client.responses.create({ ...base, input: 'My name is Ada.', max_output_tokens: 3 });
  const two = await first.client.responses.create({ ...base, input: 'What is my name?', previous_response_id: one.id, max_output_tokens: 3 });
  expect(await stop(first.server, 'SIGTERM')).toBe(0);

  const { client, server } = await serve();
  expect(await client.responses.retrieve(two.id)).toEqual(two);
  const items = await client.responses.inputItems.list(two.id);
  expect(items.data).toHaveLength(1);
  expect(items.data[0]).toMatchObject({ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What is my name?' }] });
  const three = await client.responses.create({ ...base, input: 'Again?', previous_response_id: two.id, max_output_tokens: 3 });
  expect(three.previous_response_id).toBe(two.id);
  // The restarted server found both earlier turns: they are in the third turn's prompt.
  expect(three.usage!.input_tokens).toBeGreaterThan(two.usage!.input_tokens + two.usage!.output_tokens);
  expect(await stop(server, 'SIGTERM')).toBe(0);
});

/** A small seeded generator, so that a failing run's kill points can be replayed from its seed. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

interface Seen {
  id?: string;
  text: string;
  /** The response of the final event (response.completed or response.incomplete), when it arrived. */
  final?: Response;
}

/** When a round kills the server: after so many text deltas in all, at a stream's text done (the store write is next), at a final event, or after a delay. */
type KillPoint = { after: 'deltas'; count: number } | { after: 'text_done' | 'final'; nth: number } | { after: 'ms'; ms: number };

/** The kill points of the rounds: one of each kind, in a random place, then one of a random kind. */
function killPoints(next: () => number): KillPoint[] {
  const of = (kind: number): KillPoint => {
    if (kind === 0) return { after: 'final', nth: Math.floor(next() * 3) };
    // Fewer than the shortest round's deltas (6 streams of at least 8 tokens): this kill cuts streams short.
    if (kind === 1) return { after: 'deltas', count: 1 + Math.floor(next() * 40) };
    if (kind === 2) return { after: 'text_done', nth: Math.floor(next() * 3) };
    return { after: 'ms', ms: 20 + Math.floor(next() * 400) };
  };
  return [0, 1, 2, 3, Math.floor(next() * 4)].map(of);
}

/** Streams of several lengths, stored, all at once; the server is killed at `point`. What each client saw. */
async function killedRound(client: OpenAI, server: ServeProcess, point: KillPoint, next: () => number): Promise<Seen[]> {
  let deltas = 0;
  let textDone = 0;
  let finals = 0;
  const kill = () => server.child.kill('SIGKILL');
  const check = () => {
    if ((point.after === 'deltas' && deltas >= point.count) || (point.after === 'text_done' && textDone > point.nth) || (point.after === 'final' && finals > point.nth)) kill();
  };
  if (point.after === 'ms') setTimeout(kill, point.ms);
  const lengths = Array.from({ length: 6 }, () => 8 + Math.floor(next() * 60));
  const seen = lengths.map((): Seen => ({ text: '' }));
  await Promise.all(
    lengths.map(async (length, i) => {
      const body = { ...base, input: `Story ${i}`, max_output_tokens: length, stream: true, logit_bias: NEVER_END, reasoning: { effort: 'none' } };
      try {
        const stream = await client.responses.create(body as ResponseCreateParamsStreaming);
        for await (const event of stream as AsyncIterable<ResponseStreamEvent>) {
          if (event.type === 'response.created') seen[i]!.id = event.response.id;
          else if (event.type === 'response.output_text.delta') (seen[i]!.text += event.delta), deltas++;
          else if (event.type === 'response.output_text.done') textDone++;
          else if (event.type === 'response.completed' || event.type === 'response.incomplete') (seen[i]!.final = event.response), finals++;
          check();
        }
      } catch {
        // The server was killed under this stream.
      }
    }),
  );
  // A round whose kill point never came (the streams all ended first) kills the server now.
  kill();
  await server.exited;
  running.delete(server);
  return seen;
}

it('keeps each response whole or absent when the server is killed while streaming and storing', async () => {
  const seed = Date.now();
  const next = random(seed);
  const all: Seen[] = [];
  const points = killPoints(next);
  for (const point of points) {
    const { server, client } = await serve();
    // The first server of each round opens what the last one's death left, and must not have found it damaged.
    expect(server.log(), `seed ${seed}`).not.toContain('not a readable SQLite database');
    all.push(...(await killedRound(client, server, point, next)));

    const db = new Database(path.join(home, 'responses.db'));
    try {
      expect(db.pragma('integrity_check', { simple: true }), `seed ${seed}`).toBe('ok');
      expect(db.pragma('foreign_key_check'), `seed ${seed}`).toEqual([]);
      // Written in one transaction with its items: no response without its input and output.
      const partial = db.prepare("SELECT id FROM responses r WHERE NOT EXISTS (SELECT 1 FROM items WHERE response_id = r.id AND kind = 'input') OR NOT EXISTS (SELECT 1 FROM items WHERE response_id = r.id AND kind = 'output')").all();
      expect(partial, `seed ${seed}`).toEqual([]);
    } finally {
      db.close();
    }
  }
  const context = `seed ${seed}, kill points ${JSON.stringify(points)}`;
  // The kills came both before and after some streams' ends (the first two rounds see to it): otherwise the test checked nothing.
  expect(all.some((s) => s.final), context).toBe(true);
  expect(all.some((s) => s.id && !s.final), context).toBe(true);

  const { server, client } = await serve();
  for (const seen of all.filter((s) => s.id)) {
    const stored = await client.responses.retrieve(seen.id!).catch((error: { status?: number }) => {
      if (error.status === 404) return undefined;
      throw error;
    });
    if (seen.final) {
      expect(stored, `${seen.id} reached the client whole, so it was stored; ${context}`).toBeDefined();
      // output_text is the SDK's own addition to a fetched response, which a streamed one lacks.
      const { output_text: text, ...kept } = stored!;
      expect(kept, context).toEqual(seen.final);
      expect(text, context).toBe(seen.text);
      continue;
    }
    if (!stored) continue;
    // Stored, though the client lost its final event: the whole generation (NEVER_END runs it to max_output_tokens), of which the client saw a prefix.
    expect(stored.status, context).toBe('incomplete');
    expect(stored.usage!.output_tokens, context).toBe(stored.max_output_tokens);
    expect(textOf(stored).startsWith(seen.text), context).toBe(true);
    const items = await client.responses.inputItems.list(seen.id!);
    expect(items.data, context).toHaveLength(1);
  }
  expect(await stop(server, 'SIGTERM')).toBe(0);
}, 60_000);
