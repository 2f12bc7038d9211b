/**
 * Ollama API benchmark (not a test): the same chat request through Ollama's
 * POST /api/chat and OpenAI's POST /v1/chat/completions on one lserve
 * server, streamed, alternating the two routes so that both see the same
 * machine state. The goal: /api/chat no slower (it runs the same chat task;
 * only the wire differs).
 *
 * The model is the Qwen3-0.6B-sized synthetic GGUF (bench/text/models.ts).
 * Each request: a short conversation, `--tokens` generated with greedy
 * sampling and the end-of-turn tokens banned (random weights would stop at
 * random). Per route: time to the first token, total time, and the decode
 * rate the client sees; then their ratios (Ollama / OpenAI).
 *
 *   npx tsx bench/ollama.ts [--rounds 8] [--tokens 64] [--threads 2]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { NEVER_END } from '../test/helpers/chat-model.js';
import { runLserve, startLserve, stopLserve } from './load/lserve.js';
import { benchChatModel } from './text/models.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '8' },
    tokens: { type: 'string', default: '64' },
    threads: { type: 'string', default: '2' },
  },
});
const ROUNDS = Number(args.rounds);
const TOKENS = Number(args.tokens);
const MODEL = 'qwen3-bench';

interface Measure {
  ttftMs: number;
  totalMs: number;
  tokens: number;
}

const messages = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Write a short paragraph about the sea.' },
];

/** Reads a streamed body line by line (NDJSON) or event by event (SSE), calling `each` with every JSON payload. */
async function readStream(res: Response, separator: string, each: (payload: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    for (let end = buffer.indexOf(separator); end >= 0; end = buffer.indexOf(separator)) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + separator.length);
      if (frame.trim()) each(frame);
    }
  }
}

async function viaOllama(url: string): Promise<Measure> {
  const started = performance.now();
  const res = await fetch(`${url}/api/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, think: false, options: { temperature: 0, num_predict: TOKENS, logit_bias: NEVER_END } }),
  });
  if (!res.ok) throw new Error(`/api/chat: ${res.status} ${await res.text()}`);
  let first: number | undefined;
  let tokens = 0;
  await readStream(res, '\n', (line) => {
    const object = JSON.parse(line) as { done: boolean; message?: { content?: string }; eval_count?: number };
    if (!object.done && object.message?.content) first ??= performance.now();
    if (object.done) tokens = object.eval_count ?? 0;
  });
  const end = performance.now();
  return { ttftMs: (first ?? end) - started, totalMs: end - started, tokens };
}

async function viaOpenAI(url: string): Promise<Measure> {
  const started = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, thinking_enabled: false, temperature: 0, max_tokens: TOKENS, logit_bias: NEVER_END, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`/v1/chat/completions: ${res.status} ${await res.text()}`);
  let first: number | undefined;
  let tokens = 0;
  await readStream(res, '\n\n', (frame) => {
    const data = frame.replace(/^data: /, '');
    if (data === '[DONE]') return;
    const chunk = JSON.parse(data) as { choices: Array<{ delta?: { content?: string } }>; usage?: { completion_tokens: number } | null };
    if (chunk.choices[0]?.delta?.content) first ??= performance.now();
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
  });
  const end = performance.now();
  return { ttftMs: (first ?? end) - started, totalMs: end - started, tokens };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const home = mkdtempSync(path.join(os.tmpdir(), 'lserve-bench-ollama-'));
try {
  const pulled = await runLserve(home, ['pull', benchChatModel(), '--kind', 'chat', '--id', MODEL, '--quiet']);
  if (pulled.code !== 0) throw new Error(pulled.output);
  const lserve = await startLserve(home, ['--threads', args.threads!]);
  try {
    // Warm-up: the load, and the conversation's prompt in the cache for both routes alike.
    await viaOpenAI(lserve.base);
    await viaOllama(lserve.base);
    const ollama: Measure[] = [];
    const openai: Measure[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Alternating which goes first, so neither always follows the other.
      if (round % 2 === 0) {
        ollama.push(await viaOllama(lserve.base));
        openai.push(await viaOpenAI(lserve.base));
      } else {
        openai.push(await viaOpenAI(lserve.base));
        ollama.push(await viaOllama(lserve.base));
      }
      const [a, b] = [ollama.at(-1)!, openai.at(-1)!];
      console.log(`round ${round + 1}: /api/chat TTFT ${a.ttftMs.toFixed(0)} ms, total ${a.totalMs.toFixed(0)} ms; /v1/chat/completions TTFT ${b.ttftMs.toFixed(0)} ms, total ${b.totalMs.toFixed(0)} ms`);
    }
    const row = (name: string, ms: Measure[]) => {
      const ttft = median(ms.map((m) => m.ttftMs));
      const total = median(ms.map((m) => m.totalMs));
      const rate = median(ms.map((m) => (m.tokens - 1) / ((m.totalMs - m.ttftMs) / 1000)));
      console.log(`${name.padEnd(22)} ${ttft.toFixed(0).padStart(8)} ${total.toFixed(0).padStart(9)} ${rate.toFixed(1).padStart(9)}   tokens ${median(ms.map((m) => m.tokens))}`);
      return { ttft, total, rate };
    };
    console.log(`\n${ROUNDS} rounds, ${TOKENS} tokens each, ${args.threads} threads, node ${process.version}, ${os.cpus().length} CPUs (medians)`);
    console.log(`${'route'.padEnd(22)} ${'TTFT ms'.padStart(8)} ${'total ms'.padStart(9)} ${'tok/s'.padStart(9)}`);
    const a = row('POST /api/chat', ollama);
    const b = row('POST /v1/chat/completions', openai);
    console.log(`ratio Ollama / OpenAI: TTFT ${(a.ttft / b.ttft).toFixed(3)}, total ${(a.total / b.total).toFixed(3)}, decode rate ${(a.rate / b.rate).toFixed(3)}`);
  } finally {
    await stopLserve(lserve);
  }
} finally {
  rmSync(home, { recursive: true, force: true });
}
