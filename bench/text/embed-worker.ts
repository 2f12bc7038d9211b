/**
 * One side of the Qwen3-Embedding benchmark, alone in its own process so its
 * resident memory is its own (bench/text/qwen3embed.ts starts it, one at a
 * time). Prints one JSON line (WorkerResult) on stdout.
 *
 *   node --import tsx bench/text/embed-worker.ts --side lserve --model FILE --texts TEXTS.json --threads 2
 *   node --import tsx bench/text/embed-worker.ts --side direct --model FILE --texts TEXTS.json \
 *        --contexts 2 --context-size 8192 --batch 512 --context-threads 1
 *
 * lserve: the real HTTP server (Engine + startServer, as bench/text.ts), one
 * POST /v1/embeddings per request, encoding_format float; the client runs in
 * the same process (its share of the memory is small: one response of ≤ 32
 * vectors). `--ctx-size N` passes `serve --ctx-size N`.
 *
 * direct: node-llama-cpp's own API with the shape given: `contexts` embedding
 * contexts of `context-size` tokens, `batch` and `context-threads` threads
 * each, created one after the other; a request's inputs are spread over
 * them as lserve's pool does (each context takes the next unclaimed input,
 * the first context rotating from request to request), each through
 * `context.getEmbeddingFor(text)`.
 *
 * `--context-threads auto` gives each context `{ ideal: threads, min: 1 }`
 * instead (node-llama-cpp shares the threads among the contexts busy at the
 * moment); shape.threadsPerContext is then reported as 0.
 *
 * Both: load, one warm-up request (the `--warmup` size, default 4: every
 * context of a pool of up to 4 has evaluated once), then memory, then each request size of
 * `--sizes` `--reps` times in turn; rates are inputs / wall time of the request.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { LlamaEmbeddingContext } from 'node-llama-cpp';
import { loadDirect } from './direct.js';

export interface Memory {
  /** process.memoryUsage().rss, bytes. */
  rss: number;
  /** /proc/self/status RssAnon and RssFile (weights are a file mapping), bytes; 0 where unknown. */
  rssAnon: number;
  rssFile: number;
}

export interface WorkerResult {
  side: 'lserve' | 'direct';
  /** What the contexts were: lserve's from its plan line, direct's as given. */
  shape: { contexts: number; contextSize: number; batchSize: number; threadsPerContext: number };
  /** lserve's `<id>: context plan: …` line. */
  planLine?: string;
  /** Bytes lserve's plan estimated for all contexts (node-llama-cpp's estimate). */
  planBytes?: number;
  loadMs: number;
  /** Before the model loads: lserve with its server listening, direct with node-llama-cpp imported. */
  beforeLoad: Memory;
  /** After load + one warm-up request. */
  afterWarmup: Memory;
  /** Peak resident memory of the process at the end, KiB (process.resourceUsage().maxRSS). */
  maxRssKiB: number;
  /** lserve: usage.prompt_tokens / inputs over all its requests (the tokens it evaluated per input). */
  tokensPerInput?: number;
  /** Per request size: embeddings per second of each repetition. */
  rates: Record<string, number[]>;
  /** Per request size: CPU time of the whole process (user + system) per input, ms; less sensitive than rates to other jobs on the machine. */
  cpuMsPerInput: Record<string, number[]>;
  /** With `--long K`: one request of one input per context, each K texts joined (≈ K × 100 tokens), then memory. */
  long?: { tokensPerInput: number; rate: number; after: Memory };
}

const { values: args } = parseArgs({
  options: {
    side: { type: 'string' },
    model: { type: 'string' },
    texts: { type: 'string' },
    threads: { type: 'string', default: '2' },
    sizes: { type: 'string', default: '1,8,32' },
    reps: { type: 'string', default: '1' },
    warmup: { type: 'string', default: '4' },
    'ctx-size': { type: 'string' },
    contexts: { type: 'string' },
    'context-size': { type: 'string' },
    batch: { type: 'string' },
    'context-threads': { type: 'string' },
    long: { type: 'string', default: '0' },
  },
});

const texts = JSON.parse(readFileSync(args.texts!, 'utf8')) as string[];
const sizes = args.sizes.split(',').map(Number);
const reps = Number(args.reps);

function memory(): Memory {
  let rssAnon = 0;
  let rssFile = 0;
  try {
    const status = readFileSync('/proc/self/status', 'utf8');
    rssAnon = Number(/RssAnon:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
    rssFile = Number(/RssFile:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
  } catch {
    // not Linux
  }
  return { rss: process.memoryUsage().rss, rssAnon, rssFile };
}

/** Requests: a size takes the next `size` texts, so no request repeats another's inputs. */
let cursor = 0;
function take(size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < size; i++) out.push(texts[cursor++ % texts.length]!);
  return out;
}

/** One long input per context, for what a full batch costs (`--long K`: K texts joined). */
async function measureLong(request: (inputs: string[]) => Promise<void>, contexts: number): Promise<WorkerResult['long']> {
  const k = Number(args.long);
  if (!(k > 0)) return undefined;
  const inputs = Array.from({ length: contexts }, () => take(k).join(' '));
  const start = performance.now();
  await request(inputs);
  return { tokensPerInput: k * 100, rate: (inputs.length * 1000) / (performance.now() - start), after: memory() };
}

async function measure(request: (inputs: string[]) => Promise<void>): Promise<{ afterWarmup: Memory; rates: Record<string, number[]>; cpuMsPerInput: Record<string, number[]> }> {
  await request(take(Number(args.warmup)));
  const afterWarmup = memory();
  const rates: Record<string, number[]> = {};
  const cpuMsPerInput: Record<string, number[]> = {};
  for (let r = 0; r < reps; r++) {
    for (const size of sizes) {
      const inputs = take(size);
      const cpu = process.cpuUsage();
      const start = performance.now();
      await request(inputs);
      (rates[size] ??= []).push((size * 1000) / (performance.now() - start));
      const used = process.cpuUsage(cpu);
      (cpuMsPerInput[size] ??= []).push((used.user + used.system) / 1000 / size);
    }
  }
  return { afterWarmup, rates, cpuMsPerInput };
}

/** Parses `<id>: context plan: [N contexts × ]T tokens, batch B, ≈X MiB of a … budget (…)`. */
export function parsePlan(line: string): { contexts: number; contextSize: number; batchSize: number; bytes: number } {
  const m = /context plan: (?:(\d+) contexts × )?(\d+) tokens, batch (\d+), (?:≈([\d.]+) (B|KB|MB|GB|TB))?/.exec(line);
  if (!m) throw new Error(`unrecognised plan line: ${line}`);
  // formatBytes (src/core/units.ts) writes binary multiples as KB, MB, GB.
  const unit = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 }[m[5] ?? 'B']!;
  return { contexts: Number(m[1] ?? 1), contextSize: Number(m[2]), batchSize: Number(m[3]), bytes: m[4] ? Number(m[4]) * unit : 0 };
}

async function lserveSide(): Promise<WorkerResult> {
  // Imported here, so that the direct side loads nothing of lserve but its llama runtime (getRuntime: same binary, same thread cap).
  const { Engine } = await import('../../src/compose.js');
  const { startServer } = await import('../../src/http/server.js');
  const threads = Number(args.threads);
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-embed-'));
  const lines: string[] = [];
  const ctx = args['ctx-size'] ? Number(args['ctx-size']) : undefined;
  const engine = new Engine({ home, threads, parallel: 4, keepAliveMs: -1, maxQueue: 64, log: (m) => lines.push(m), contextSizes: { all: ctx, models: {} } });
  await engine.store.registerLocal(args.model!, { kind: 'embedding', id: 'qwen3-embed-synth' });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 8 << 20, logFormat: 'off', log: () => {} });
  const usage = { tokens: 0, inputs: 0 };
  try {
    const post = async (input: string[]) => {
      const res = await fetch(`${server.url}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'qwen3-embed-synth', input, encoding_format: 'float' }),
      });
      if (!res.ok) throw new Error(`embeddings: HTTP ${res.status} ${await res.text()}`);
      const body = (await res.json()) as { data: unknown[]; usage: { prompt_tokens: number } };
      if (body.data.length !== input.length) throw new Error('embeddings: wrong count');
      if (input.length > 1 || input[0] !== 'load') {
        usage.tokens += body.usage.prompt_tokens;
        usage.inputs += input.length;
      }
    };
    await import('node-llama-cpp'); // its JS, as the direct side has it before loading (the binary loads with the model)
    const beforeLoad = memory();
    // The model loads on the first request; time it apart from the warm-up's evaluation.
    const start = performance.now();
    await post(['load']);
    const loadMs = performance.now() - start;
    const { afterWarmup, rates, cpuMsPerInput } = await measure(post);
    const planLine = lines.find((l) => l.includes('context plan:'));
    if (!planLine) throw new Error(`no plan line in the log:\n${lines.join('\n')}`);
    const plan = parsePlan(planLine);
    const long = await measureLong(post, plan.contexts);
    return {
      side: 'lserve',
      // Threads per context are not in the line: loadContextPool gives each floor(threads / contexts).
      shape: { contexts: plan.contexts, contextSize: plan.contextSize, batchSize: plan.batchSize, threadsPerContext: Math.max(1, Math.floor(threads / plan.contexts)) },
      planLine,
      planBytes: plan.bytes,
      tokensPerInput: usage.tokens / usage.inputs,
      loadMs,
      beforeLoad,
      afterWarmup,
      maxRssKiB: process.resourceUsage().maxRSS,
      rates,
      cpuMsPerInput,
      long,
    };
  } finally {
    await server.close();
    await rm(home, { recursive: true, force: true });
  }
}

async function directSide(): Promise<WorkerResult> {
  const shape = {
    contexts: Number(args.contexts),
    contextSize: Number(args['context-size']),
    batchSize: Number(args.batch),
    threadsPerContext: Number(args['context-threads']),
  };
  // `--context-threads auto`: every context asks for all the threads, at least 1; node-llama-cpp's
  // thread splitter shares them among the contexts evaluating at the moment.
  const dynamic = args['context-threads'] === 'auto';
  if (dynamic) shape.threadsPerContext = 0;
  await import('node-llama-cpp');
  const beforeLoad = memory();
  const start = performance.now();
  const model = await loadDirect(args.model!);
  const contexts: LlamaEmbeddingContext[] = [];
  for (let i = 0; i < shape.contexts; i++) {
    // createEmbeddingContext types `threads` as a number but hands it to createContext, which takes { ideal, min } too.
    const threads = (dynamic ? { ideal: Number(args.threads), min: 1 } : shape.threadsPerContext) as number;
    contexts.push(await model.createEmbeddingContext({ contextSize: shape.contextSize, batchSize: shape.batchSize, threads }));
  }
  let turn = 0;
  const embedAll = async (inputs: string[]) => {
    const first = turn++ % contexts.length;
    const order = [...contexts.slice(first), ...contexts.slice(0, first)].slice(0, inputs.length);
    let next = 0;
    await Promise.all(
      order.map(async (context) => {
        while (next < inputs.length) await context.getEmbeddingFor(inputs[next++]!);
      }),
    );
  };
  try {
    await embedAll(['load']); // as lserve's first request, which loads the model
    const loadMs = performance.now() - start;
    const { afterWarmup, rates, cpuMsPerInput } = await measure(embedAll);
    const long = await measureLong(embedAll, contexts.length);
    return { side: 'direct', shape, loadMs, beforeLoad, afterWarmup, maxRssKiB: process.resourceUsage().maxRSS, rates, cpuMsPerInput, long };
  } finally {
    for (const context of contexts) await context.dispose();
    await model.dispose();
  }
}

const result = args.side === 'lserve' ? await lserveSide() : args.side === 'direct' ? await directSide() : undefined;
if (!result) throw new Error('--side lserve|direct');
process.stdout.write(`${JSON.stringify(result)}\n`, () => process.exit(0));
