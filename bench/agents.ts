/**
 * Agent loop benchmark (not a test): how fast each turn of a coding agent's
 * session starts, lserve beside llama.cpp's own server on the same GGUF and
 * the same request sequence, each with its default settings (lserve: no
 * --ctx-size, 4 sequences; llama-server: -np auto, -c the training context,
 * its unified KV cache and 8 GiB prompt cache).
 *
 * The model is the Qwen3-0.6B-sized synthetic GGUF (bench/text/models.ts).
 * The session, in each API shape (Anthropic Messages, OpenAI Responses):
 * the agent's first request (test/helpers/agent-requests.ts: ≈ 9-12k tokens
 * of system prompt and tools), then `--turns` turns, each adding the
 * assistant's tool call and its result (a scripted one, the same for both
 * servers: random weights say nothing) and asking for the next step; between
 * turns a side request (a title for the session, another system prompt), as
 * agents send. Every request asks for one token: what is timed is the
 * prompt's evaluation.
 *
 * Per turn: time to the first token (streamed), and the prompt tokens each
 * server evaluated (its prompt less what its cache held, as its own usage
 * reports it). The goal: every turn after the first no slower than
 * llama-server's, and never a full evaluation of the conversation again.
 *
 * `--parallel N` gives both servers N sequences (lserve `--parallel`,
 * llama-server `-np`), the rest still their defaults: with 1, every side
 * request takes the conversation's sequence, and the next turn shows what
 * each server's prompt cache in host memory restores.
 *
 *   npx tsx bench/agents.ts [--turns 6] [--threads 2] [--apis anthropic,responses] [--parallel N] [--llama-bin /tmp/llama-build/build/bin] [--skip-llama]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { anthropicAgentRequest, responsesAgentRequest } from '../test/helpers/agent-requests.js';
import { freePort } from '../test/helpers/free-port.js';
import { runLserve, startLserve, stopLserve } from './load/lserve.js';
import { llamaBin, startLlamaServer } from './text/llamacpp.js';
import { benchChatModel } from './text/models.js';

const { values: args } = parseArgs({
  options: {
    turns: { type: 'string', default: '6' },
    threads: { type: 'string', default: '2' },
    apis: { type: 'string', default: 'anthropic,responses' },
    'llama-bin': { type: 'string', default: '/tmp/llama-build/build/bin' },
    'skip-llama': { type: 'boolean', default: false },
    parallel: { type: 'string' },
  },
});
const TURNS = Number(args.turns);
const THREADS = Number(args.threads);
const MODEL = 'qwen3-bench';

type Api = 'anthropic' | 'responses';
interface Measure {
  ttftMs: number;
  prompt: number;
  evaluated: number;
}

/** A scripted file the agent reads on each turn: the same ≈ 400 tokens of source for both servers. */
const fileContent = (turn: number) => Array.from({ length: 40 }, (_, i) => `export const value${turn}_${i} = compute(${i}, 'turn ${turn}');`).join('\n');

/** Streams `body` to `url`; resolves at the first token with the usage the stream reports at its end. */
async function timed(url: string, body: unknown, api: Api): Promise<Measure> {
  const started = performance.now();
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body: JSON.stringify(body) });
  if (!res.ok || !res.body) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let first: number | undefined;
  let usage: Record<string, unknown> | undefined;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk as Uint8Array, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split('\n').find((line) => line.startsWith('data: '))?.slice(6);
      if (!data || data === '[DONE]') continue;
      const event = JSON.parse(data) as { type: string; message?: { usage?: Record<string, unknown> }; usage?: Record<string, unknown>; response?: { usage?: Record<string, unknown> } };
      if (first === undefined && /delta$/.test(event.type)) first = performance.now();
      if (api === 'anthropic' && event.type === 'message_start') usage = { ...event.message?.usage };
      if (api === 'anthropic' && event.type === 'message_delta') usage = { ...usage, ...event.usage };
      if (api === 'responses' && (event.type === 'response.completed' || event.type === 'response.incomplete')) usage = event.response?.usage;
    }
  }
  const end = performance.now();
  const u = usage ?? {};
  if (api === 'anthropic') {
    const evaluated = Number(u.input_tokens ?? 0) + Number(u.cache_creation_input_tokens ?? 0);
    const cached = Number(u.cache_read_input_tokens ?? 0);
    return { ttftMs: (first ?? end) - started, prompt: evaluated + cached, evaluated };
  }
  const prompt = Number(u.input_tokens ?? 0);
  const cached = Number((u.input_tokens_details as { cached_tokens?: number } | undefined)?.cached_tokens ?? 0);
  return { ttftMs: (first ?? end) - started, prompt, evaluated: prompt - cached };
}

/** The session's requests in one API shape: the agent's turns, and the side request asked between them. */
function session(api: Api) {
  if (api === 'anthropic') {
    const first = { ...anthropicAgentRequest(MODEL), max_tokens: 1, thinking: { type: 'disabled' } };
    const messages: unknown[] = [...first.messages];
    return {
      path: '/v1/messages',
      turn: () => ({ ...first, messages: [...messages] }),
      advance: (turn: number) => {
        const id = `toolu_bench_${turn}`;
        messages.push({ role: 'assistant', content: [{ type: 'text', text: `Reading file ${turn}.` }, { type: 'tool_use', id, name: 'Read', input: { file_path: `/home/dev/project/src/file${turn}.ts` } }] });
        messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: fileContent(turn) }, { type: 'text', text: 'Continue.' }] });
      },
      side: (turn: number) => ({ model: MODEL, max_tokens: 1, stream: true, system: 'Write a five-word title for the conversation.', messages: [{ role: 'user', content: `Session about the server's port flag, step ${turn}.` }] }),
    };
  }
  const first = { ...responsesAgentRequest(MODEL), max_output_tokens: 1, reasoning: { effort: 'none' } };
  const input: unknown[] = [...first.input];
  return {
    path: '/v1/responses',
    turn: () => ({ ...first, input: [...input] }),
    advance: (turn: number) => {
      const call = `call_bench_${turn}`;
      input.push({ type: 'function_call', call_id: call, name: 'read', arguments: JSON.stringify({ file_path: `/home/dev/project/src/file${turn}.ts` }) });
      input.push({ type: 'function_call_output', call_id: call, output: fileContent(turn) });
    },
    side: (turn: number) => ({ model: MODEL, max_output_tokens: 1, stream: true, store: false, instructions: 'Write a five-word title for the conversation.', input: `Session about the server's port flag, step ${turn}.` }),
  };
}

async function run(base: string, api: Api): Promise<Measure[]> {
  const s = session(api);
  const measures: Measure[] = [];
  for (let turn = 1; turn <= TURNS; turn++) {
    measures.push(await timed(`${base}${s.path}`, s.turn(), api));
    process.stderr.write(`  ${api} turn ${turn}: ${(measures.at(-1)!.ttftMs / 1000).toFixed(1)} s, ${measures.at(-1)!.evaluated} of ${measures.at(-1)!.prompt} tokens evaluated\n`);
    s.advance(turn);
    if (turn < TURNS) await timed(`${base}${s.path}`, s.side(turn), api);
  }
  return measures;
}

const model = benchChatModel();
const home = mkdtempSync(path.join(os.tmpdir(), 'lserve-bench-agents-'));
const pulled = await runLserve(home, ['pull', model, '--kind', 'chat', '--id', MODEL, '--quiet']);
if (pulled.code !== 0) throw new Error(pulled.output);
const lserve = await startLserve(home, ['--threads', String(THREADS), ...(args.parallel ? ['--parallel', args.parallel] : [])]);
const bin = args['skip-llama'] ? undefined : llamaBin(args['llama-bin'], 'llama-server');
if (!args['skip-llama'] && !bin) console.error(`no llama-server in ${args['llama-bin']} (bench/text.md, "llama.cpp reference binaries": how to build it); lserve alone`);
const results: Record<string, { lserve: Measure[]; llama?: Measure[] }> = {};
try {
  for (const api of args.apis.split(',') as Api[]) {
    // One server at a time on the cores: the other is idle (llama-server is started for its turn and stopped after).
    console.error(`${api}: lserve`);
    const mine = await run(lserve.base, api);
    let theirs: Measure[] | undefined;
    if (bin) {
      console.error(`${api}: llama-server`);
      const llama = await startLlamaServer(bin, model, { threads: THREADS, port: await freePort(), args: args.parallel ? ['-np', args.parallel] : [] });
      try {
        theirs = await run(llama.url, api);
      } finally {
        await llama.stop();
      }
    }
    results[api] = { lserve: mine, llama: theirs };
  }
} finally {
  await stopLserve(lserve);
  rmSync(home, { recursive: true, force: true });
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`.padStart(8);
console.log(`\nAgent loop, ${TURNS} turns with a side request between them, ${THREADS} threads, Qwen3-0.6B-sized synthetic Q8_0, each server's defaults${args.parallel ? ` but ${args.parallel} sequence(s)` : ''}:`);
for (const [api, { lserve: mine, llama }] of Object.entries(results)) {
  console.log(`\n${api}  turn   lserve TTFT  evaluated/prompt${llama ? '   llama-server TTFT  evaluated/prompt   ratio (llama/lserve)' : ''}`);
  mine.forEach((m, i) => {
    const other = llama?.[i];
    const row = `      ${String(i + 1).padStart(4)} ${seconds(m.ttftMs)}   ${`${m.evaluated}/${m.prompt}`.padStart(14)}`;
    console.log(other ? `${row}   ${seconds(other.ttftMs)}          ${`${other.evaluated}/${other.prompt}`.padStart(14)}   ${(other.ttftMs / m.ttftMs).toFixed(2)}` : row);
  });
}
