/**
 * Responses benchmark (not a test): a stored conversation continued with
 * `previous_response_id` against the same conversation sent in full through
 * chat completions, on one server and the synthetic Qwen3-0.6B-sized model
 * (bench/text/models.ts). The measure is time to first token of turn 3: the
 * prompt then holds a long first message and two turns, and what it costs
 * depends on how much of it the slot's KV cache still holds. Each
 * conversation is sent both ways, turn by turn in alternation, so drift hits
 * both; every conversation's text is its own, so neither way finds the
 * other's tokens in a slot.
 *
 *   npx tsx bench/responses.ts [--threads 2] [--conversations 15] [--tokens 16] [--notes 15]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Engine } from '../src/compose.js';
import { startServer } from '../src/http/server.js';
import { benchChatModel } from './text/models.js';
import { streamChat, streamResponse, type StreamResult } from './text/stream.js';

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    conversations: { type: 'string', default: '15' },
    tokens: { type: 'string', default: '16' },
    notes: { type: 'string', default: '15' },
  },
});
const threads = Number(args.threads);
const conversations = Number(args.conversations);
const tokens = Number(args.tokens);
const MODEL = 'qwen3-synth';

/** The first message: long enough (≈ 25 tokens a note) that evaluating it again would show in the time to first token. */
const firstMessage = (n: number) =>
  `Conversation ${n}. Read these notes.\n${Array.from({ length: Number(args.notes) }, (_, i) => `Note ${i + 1}: the baker of village ${n} counted ${i * 7 + n} loaves at dawn, and the dragon sighed.`).join('\n')}`;
const FOLLOW_UPS = ['How many loaves were counted in note 3?', 'And in the last note?'];
const sampling = { temperature: 0.8, top_p: 0.95 };

/** One conversation's three turns, continued through the Responses API's stored responses. */
async function* viaResponses(url: string, n: number): AsyncGenerator<StreamResult & { cachedTokens: number }> {
  let previous: string | undefined;
  for (const input of [firstMessage(n), ...FOLLOW_UPS]) {
    const turn = await streamResponse(url, { model: MODEL, input, max_output_tokens: tokens, previous_response_id: previous, ...sampling });
    previous = turn.id;
    yield turn;
  }
}

/** The same conversation through chat completions, the whole history sent each turn as a client keeps it. */
async function* viaChat(url: string, n: number): AsyncGenerator<StreamResult> {
  const messages: Array<{ role: string; content: string }> = [];
  for (const content of [firstMessage(n), ...FOLLOW_UPS]) {
    messages.push({ role: 'user', content });
    const turn = await streamChat(url, { model: MODEL, messages, max_tokens: tokens, ...sampling });
    messages.push({ role: 'assistant', content: turn.text });
    yield turn;
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (x: number, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');

async function main(): Promise<void> {
  console.log(`lserve responses benchmark: ${threads} threads, ${conversations} conversations × 3 turns each way, ${tokens} tokens a turn, node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'} ×${os.availableParallelism()}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const chatFile = benchChatModel();
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-'));
  // As `lserve serve` runs it: the model in a runner process, 4 sequences.
  const engine = new Engine({ home, threads, parallel: 4, keepAliveMs: -1, maxQueue: 64, isolation: 'process', log: () => {} });
  await engine.store.registerLocal(chatFile, { kind: 'chat', id: MODEL });
  await engine.store.setUserDefaults(MODEL, { context_size: 4096 });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 8 << 20, logFormat: 'off', log: () => {} });
  try {
    await streamChat(server.url, { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }); // loads the model
    const turns = { responses: [[], [], []] as StreamResult[][], chat: [[], [], []] as StreamResult[][], cached: [[], [], []] as number[][] };
    for (let n = 0; n < conversations; n++) {
      const responses = viaResponses(server.url, 2 * n);
      const chat = viaChat(server.url, 2 * n + 1);
      for (let turn = 0; turn < 3; turn++) {
        const r = (await responses.next()).value!;
        const c = (await chat.next()).value!;
        turns.responses[turn]!.push(r);
        turns.cached[turn]!.push(r.cachedTokens);
        turns.chat[turn]!.push(c);
      }
    }
    console.log('\nTime to first token (streamed, to the first text delta), medians:');
    console.log(`  ${'turn'.padEnd(6)} ${'prompt tokens'.padStart(14)} ${'cached (responses)'.padStart(19)} ${'responses ms'.padStart(13)} ${'chat ms'.padStart(9)} ${'ratio r/c'.padStart(10)}`);
    for (let turn = 0; turn < 3; turn++) {
      const r = median(turns.responses[turn]!.map((t) => t.ttftMs));
      const c = median(turns.chat[turn]!.map((t) => t.ttftMs));
      const prompt = `${median(turns.responses[turn]!.map((t) => t.promptTokens))}/${median(turns.chat[turn]!.map((t) => t.promptTokens))}`;
      console.log(`  ${String(turn + 1).padEnd(6)} ${prompt.padStart(14)} ${String(median(turns.cached[turn]!)).padStart(19)} ${fmt(r).padStart(13)} ${fmt(c).padStart(9)} ${fmt(r / c, 2).padStart(10)}`);
    }
    const ratios = turns.responses[2]!.map((r, i) => r.ttftMs / turns.chat[2]![i]!.ttftMs);
    console.log(`\nTurn 3, per conversation (responses/chat): ${ratios.map((x) => x.toFixed(2)).join(' ')}`);
    console.log(`Issue target: turn 3 ratio ≤ 1 (median of the two medians above). Load after: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  } finally {
    await server.close();
    await rm(home, { recursive: true, force: true });
  }
}

await main();
