/**
 * Text benchmark (not a test): the server against node-llama-cpp called
 * directly, and against llama.cpp's own tools, on the same synthetic GGUF of
 * real size (Qwen3-0.6B dimensions, Q8_0, real Qwen tokenizer). Everything is
 * measured side by side in one run; read the ratios, not the absolute
 * numbers (shared machines are noisy).
 *
 *   npx tsx bench/text.ts [--threads 2] [--tokens 64] [--runs 3] [--builds default,prebuilt] [--isolation process] [--parallel 4] [--streams 1,2,4,8]
 *                         [--llama-bin /tmp/llama-build/build/bin] [--skip chat,streams,prompt,embed,llamacpp,qwen3embed]
 *
 * The qwen3embed section (a Qwen3-Embedding-0.6B-sized model) runs lserve and
 * node-llama-cpp direct in child processes of their own, one at a time, so
 * their resident memory can be compared; alone:
 *   npx tsx bench/text.ts --skip chat,streams,embed,llamacpp --runs 3
 *
 * --builds: lserve's llama.cpp binaries measured side by side, each on a
 * server of its own; the overhead and embedding sections use the first.
 * `default` is what a fresh install runs (LSERVE_LLAMA_BUILD unset, an empty
 * home: the shipped threadpool addon where there is one); the others are
 * LSERVE_LLAMA_BUILD values, `threadpool` meaning the addon found in
 * LSERVE_HOME (`npm run build:llama`) or shipped.
 *
 * --isolation: where each lserve side runs its model: `process` (a runner
 * process, as `lserve serve` does), `server` (in the server's process,
 * LSERVE_RUNNERS=off). `--builds default --isolation process,server` gives
 * what the process boundary costs, on the same binary:
 *   npx tsx bench/text.ts --builds default --isolation process,server --skip prompt,embed,llamacpp,qwen3embed --runs 5
 *
 * The polling section (`--skip` it as `polling`) measures both sides of
 * letting llama.cpp's threadpool spin between decodes (LSERVE_LLAMA_POLLING):
 * chat alone with the default (`auto`: it spins, being all there is) against
 * `off`, and chat beside an OCR loop with the default (`auto`: it sleeps)
 * against `on`, the OCR pages/s and the chat tok/s side by side:
 *   npx tsx bench/text.ts --builds default --skip chat,streams,prompt,embed,llamacpp,qwen3embed --runs 5
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Engine, type Isolation } from '../src/compose.js';
import { defaultHome } from '../src/core/store.js';
import { startServer, type RunningServer } from '../src/http/server.js';
import { setLlamaAddonHome, type LlamaBuildChoice } from '../src/runtimes/llama/runtime.js';
import { directChatRunner, directEmbeddings, loadDirect, type Sampling } from './text/direct.js';
import { llamaBenchTg, llamaBin, startLlamaServer } from './text/llamacpp.js';
import { benchChatModel, benchEmbeddingModel, benchQwen3EmbeddingModel } from './text/models.js';
import { qwen3EmbedRounds } from './text/qwen3embed.js';
import { pageSpecs, renderPage } from '../test/fixtures/ocr/corpus.js';
import { concurrentStreams, decodeRate, streamChat, type StreamTiming } from './text/stream.js';

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    tokens: { type: 'string', default: '64' },
    runs: { type: 'string', default: '3' },
    'llama-bin': { type: 'string', default: '/tmp/llama-build/build/bin' },
    parallel: { type: 'string', default: '4' },
    streams: { type: 'string', default: '1,2,4,8' },
    builds: { type: 'string', default: 'default,prebuilt' },
    isolation: { type: 'string', default: 'process' },
    skip: { type: 'string', default: '' },
  },
});
const threads = Number(args.threads);
const tokens = Number(args.tokens);
const runs = Number(args.runs);
const skip = new Set(args.skip.split(',').filter(Boolean));
/** Sequences per lserve model and slots of llama-server beside it. */
const parallel = Number(args.parallel);
const builds = args.builds.split(',').filter(Boolean) as (LlamaBuildChoice | 'default')[];
const isolations = args.isolation.split(',').filter(Boolean) as Isolation[];

/** Points the llama runtime at a build: `default` as a fresh install (no LSERVE_LLAMA_BUILD, addons from `home`). */
function useBuild(build: LlamaBuildChoice | 'default', home: string): void {
  if (build === 'default') {
    delete process.env.LSERVE_LLAMA_BUILD;
    setLlamaAddonHome(home);
  } else {
    process.env.LSERVE_LLAMA_BUILD = build;
    setLlamaAddonHome(process.env.LSERVE_HOME || defaultHome()); // where `npm run build:llama` put the addon
  }
}
/** Context per sequence, for lserve and llama-server alike: room for the long-prompt row. */
const CONTEXT = 4096;

const PROMPT = 'Write a long story about a dragon who learns to bake bread in a mountain village.';
/** ≈ 2k tokens with the Qwen tokenizer (the row prints the count each server reports). */
const LONG_PROMPT = `Summarise the notes below.\n${Array.from({ length: 95 }, (_, i) => `Note ${i + 1}: the baker of the village counted ${i * 7 + 3} loaves at dawn, and the dragon sighed.`).join('\n')}`;
const SAMPLING: Sampling = { temperature: 0.8, topP: 0.95, topK: 40, minP: 0.05 };
const chatBody = (model: string) => ({
  model,
  messages: [{ role: 'user', content: PROMPT }],
  max_tokens: tokens,
  temperature: SAMPLING.temperature,
  top_p: SAMPLING.topP,
  top_k: SAMPLING.topK,
});

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');
const rows: Array<[string, string, string]> = [];
const row = (what: string, value: string, note = '') => {
  rows.push([what, value, note]);
  console.log(`  ${what.padEnd(58)} ${value.padStart(12)}  ${note}`);
};

/** Median decode rate and TTFT over `runs` generations, alternating A and B so drift hits both. */
async function alternate(a: () => Promise<StreamTiming>, b: () => Promise<StreamTiming>): Promise<[StreamTiming[], StreamTiming[]]> {
  const ra: StreamTiming[] = [];
  const rb: StreamTiming[] = [];
  await a(); // warm-up: first load, first graph allocation
  await b();
  for (let i = 0; i < runs; i++) {
    ra.push(await a());
    rb.push(await b());
  }
  return [ra, rb];
}

async function main(): Promise<void> {
  console.log(`lserve text benchmark: ${threads} threads, ${tokens} tokens, ${runs} runs, node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'} ×${os.availableParallelism()}, lserve binaries: ${builds.join(', ')}`);
  // Models are generated (once) only for the sections that run.
  const inProcess = ['chat', 'streams', 'prompt', 'embed'].some((s) => !skip.has(s));
  const chatFile = ['chat', 'streams', 'prompt', 'llamacpp'].some((s) => !skip.has(s)) ? benchChatModel() : '';
  const embedFile = skip.has('embed') ? '' : benchEmbeddingModel();
  if (inProcess) await inProcessSections(chatFile, embedFile);
  if (!skip.has('polling')) await pollingSection(chatFile || benchChatModel());
  if (!skip.has('llamacpp')) await llamacppSection(chatFile);
  if (!skip.has('qwen3embed')) await qwen3EmbedSection();
}

interface Side {
  label: string;
  url: string;
  model: string;
}

/** One lserve server per llama.cpp binary, each with the chat model loaded on that binary (the runtime is chosen at load). */
async function lserveSides(chatFile: string, embedFile: string): Promise<{ sides: Side[]; servers: RunningServer[]; homes: string[] }> {
  const sides: Side[] = [];
  const servers: RunningServer[] = [];
  const homes: string[] = [];
  const previous = process.env.LSERVE_LLAMA_BUILD;
  for (const [build, isolation] of builds.flatMap((b) => isolations.map((i) => [b, i] as const))) {
    const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-'));
    homes.push(home);
    // As many sequences as llama-server's slots below (4 by default: an 8-stream run queues the other 4).
    let binary = build as string;
    // The load line names the binary the model really runs on (in a runner: the runner's).
    const log = (line: string) => (binary = /llama\.cpp binary: (.*)$/.exec(line)?.[1] ?? binary);
    const engine = new Engine({ home, threads, parallel, keepAliveMs: -1, maxQueue: 64, isolation, log });
    if (chatFile) {
      await engine.store.registerLocal(chatFile, { kind: 'chat', id: 'qwen3-synth' });
      await engine.store.setUserDefaults('qwen3-synth', { context_size: CONTEXT }); // as llama-server gets -c
    }
    if (embedFile && sides.length === 0) await engine.store.registerLocal(embedFile, { kind: 'embedding', id: 'bge-synth' });
    const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 8 << 20, logFormat: 'off', log: () => {} });
    servers.push(server);
    useBuild(build, home);
    if (chatFile) await streamChat(server.url, chatBody('qwen3-synth')); // loads the model on this binary
    const where = isolations.length > 1 ? (isolation === 'process' ? ', runner' : ', in-process') : '';
    sides.push({ label: `lserve (${build === 'default' ? `default: ${binary}` : binary}${where})`, url: server.url, model: 'qwen3-synth' });
  }
  if (previous === undefined) delete process.env.LSERVE_LLAMA_BUILD;
  else process.env.LSERVE_LLAMA_BUILD = previous;
  return { sides, servers, homes };
}

/** The sections that talk to lserve servers in this process (and llama-server -np 4 beside them). */
async function inProcessSections(chatFile: string, embedFile: string): Promise<void> {
  const { sides, servers, homes } = await lserveSides(chatFile, embedFile);
  const server = servers[0]!;
  const serverBin = skip.has('llamacpp') || !chatFile ? undefined : llamaBin(args['llama-bin'], 'llama-server');
  // Beside lserve: the same file, as many slots as lserve's sequences.
  const reference = serverBin ? await startLlamaServer(serverBin, chatFile, { threads, parallel, port: 18_004, contextPerSlot: CONTEXT }) : undefined;
  if (reference) await streamChat(reference.url, chatBody('any'));
  const all: Side[] = [...sides, ...(reference ? [{ label: `llama-server -np ${parallel}`, url: reference.url, model: 'any' }] : [])];

  try {
    if (!skip.has('chat')) {
      console.log(`\nChat, single stream, ${sides[0]!.label} (decode tok/s after the first token; TTFT includes prompt processing):`);
      useBuild(builds[0]!, homes[0]!);
      const direct = await loadDirect(chatFile);
      delete process.env.LSERVE_LLAMA_BUILD;
      const runner = await directChatRunner(direct, threads);
      const [viaServer, viaDirect] = await alternate(
        () => streamChat(server.url, chatBody('qwen3-synth')),
        () => runner.run(PROMPT, tokens, SAMPLING),
      );
      await runner.dispose();
      const s = median(viaServer.map(decodeRate));
      const d = median(viaDirect.map(decodeRate));
      row('lserve POST /v1/chat/completions (stream)', `${fmt(s)} tok/s`, `TTFT ${fmt(median(viaServer.map((r) => r.ttftMs)), 0)} ms`);
      row('node-llama-cpp direct (LlamaChatSession)', `${fmt(d)} tok/s`, `TTFT ${fmt(median(viaDirect.map((r) => r.ttftMs)), 0)} ms`);
      row('overhead ratio server / direct (target ≥ 0.97)', fmt(s / d, 3));
      await direct.dispose();
    }

    if (!skip.has('streams')) {
      // Each stream count is measured on every side in turn, run after run, so drift hits all alike.
      console.log(`\nChat, concurrent streams (aggregate tok/s = all tokens / wall time; median of ${runs}, sides alternated):`);
      for (const n of args.streams.split(',').map(Number)) {
        const rates = all.map(() => [] as number[]);
        for (let i = 0; i < runs; i++) for (const [k, side] of all.entries()) rates[k]!.push((await concurrentStreams(side.url, chatBody(side.model), n)).aggregate);
        compare(`${n} stream${n > 1 ? 's' : ''}`, all, rates.map(median), 'tok/s', n === 1 ? 0.95 : n === 4 ? 1.0 : undefined);
      }
    }

    if (!skip.has('prompt')) {
      // A prompt that differs from its first token on, so no side reuses a cached prefix.
      const longBody = (side: Side, i: number) => ({ ...chatBody(side.model), messages: [{ role: 'user', content: `Run ${i}. ${LONG_PROMPT}` }], max_tokens: 4 });
      const rates = all.map(() => [] as number[]);
      let promptTokens = 0;
      for (let i = 0; i < runs + 1; i++) {
        for (const [k, side] of all.entries()) {
          const t = await streamChat(side.url, longBody(side, i));
          promptTokens = t.promptTokens || promptTokens;
          if (i > 0) rates[k]!.push((t.promptTokens * 1000) / t.ttftMs); // run 0 warms up
        }
      }
      console.log(`\nChat, long prompt (${promptTokens} tokens; prompt tok/s = prompt tokens / time to first token; median of ${runs}):`);
      compare('long prompt', all, rates.map(median), 'tok/s', 1.0);
    }

    if (!skip.has('embed')) {
      console.log('\nEmbeddings, 64 short texts (bge-small-sized bert):');
      const texts = Array.from({ length: 64 }, (_, i) => `Short text number ${i} about cats, dogs and the weather today.`);
      const body = JSON.stringify({ model: 'bge-synth', input: texts, encoding_format: 'float' });
      const post = async () => {
        const start = performance.now();
        const res = await fetch(`${server.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        if (!res.ok) throw new Error(`embeddings: HTTP ${res.status} ${await res.text()}`);
        await res.json();
        return (texts.length * 1000) / (performance.now() - start);
      };
      await post();
      const direct = await loadDirect(embedFile);
      const viaServer: number[] = [];
      const viaDirect: number[] = [];
      for (let i = 0; i < runs; i++) {
        viaServer.push(await post());
        viaDirect.push(await directEmbeddings(direct, texts, threads));
      }
      row('lserve POST /v1/embeddings (one request of 64)', `${fmt(median(viaServer))} emb/s`);
      row('node-llama-cpp direct (one embedding context, in turn)', `${fmt(median(viaDirect))} emb/s`);
      row('ratio server / direct', fmt(median(viaServer) / median(viaDirect), 2));
      await direct.dispose();
    }
  } finally {
    await reference?.stop();
    for (const running of servers) await running.close(); // closes its engine too
    for (const home of homes) await rm(home, { recursive: true, force: true });
  }
}

/** A row per side and each lserve side's ratio to llama-server (the last side, when it runs). */
function compare(what: string, all: Side[], values: number[], unit: string, target?: number): void {
  for (const [k, side] of all.entries()) row(`${side.label}, ${what}`, `${fmt(values[k]!)} ${unit}`);
  const reference = all.at(-1)!;
  if (!reference.label.startsWith('llama-server')) return;
  for (const [k, side] of all.slice(0, -1).entries()) row(`ratio ${side.label} / llama-server, ${what}${target ? ` (target ≥ ${target})` : ''}`, fmt(values[k]! / values.at(-1)!, 2));
}

/**
 * Both sides of a spinning threadpool, on one server (the default binary, in
 * a runner), LSERVE_LLAMA_POLLING switched between runs: it is read each time
 * the set of busy models changes.
 */
async function pollingSection(chatFile: string): Promise<void> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-'));
  const engine = new Engine({ home, threads, parallel: 1, keepAliveMs: -1 });
  await engine.store.registerLocal(chatFile, { kind: 'chat', id: 'qwen3-synth' });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 8 << 20, logFormat: 'off', log: () => {} });
  const saved = process.env.LSERVE_LLAMA_POLLING;
  const page = JSON.stringify({ model: 'ppocr-v4-mobile', image_base64: (await renderPage(pageSpecs()[0]!)).png.toString('base64') });
  const ocr = async () => {
    const res = await fetch(`${server.url}/v1/ocr`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: page });
    if (!res.ok) throw new Error(`ocr: HTTP ${res.status} ${await res.text()}`);
    await res.json();
  };
  /** One chat stream with OCR requests one after another beside it until it ends: [chat tok/s, OCR pages/s]. */
  const beside = async (): Promise<[number, number]> => {
    let done = false;
    const chat = streamChat(server.url, chatBody('qwen3-synth')).finally(() => (done = true));
    const started = performance.now();
    let pages = 0;
    while (!done) {
      await ocr();
      pages++;
    }
    return [decodeRate(await chat), (pages * 1000) / (performance.now() - started)];
  };
  try {
    await streamChat(server.url, chatBody('qwen3-synth'));
    await ocr();
    const alone: Record<string, number[]> = { auto: [], off: [] };
    const mixed: Record<string, Array<[number, number]>> = { auto: [], on: [] };
    for (let i = 0; i < runs; i++) {
      for (const mode of ['auto', 'off']) {
        process.env.LSERVE_LLAMA_POLLING = mode;
        alone[mode]!.push(decodeRate(await streamChat(server.url, chatBody('qwen3-synth'))));
      }
      for (const mode of ['auto', 'on']) {
        process.env.LSERVE_LLAMA_POLLING = mode;
        mixed[mode]!.push(await beside());
      }
    }
    console.log(`\nThe threadpool spinning between decodes (LSERVE_LLAMA_POLLING; median of ${runs}, modes alternated):`);
    row('chat alone, auto (spins: chat is all there is)', `${fmt(median(alone.auto!))} tok/s`);
    row('chat alone, off (sleeps after each decode)', `${fmt(median(alone.off!))} tok/s`);
    row('ratio auto / off, chat alone', fmt(median(alone.auto!) / median(alone.off!), 3));
    for (const mode of ['auto', 'on']) {
      const label = mode === 'auto' ? 'auto (sleeps: OCR is running too)' : 'on (spins whatever runs)';
      row(`beside OCR, ${label}: chat`, `${fmt(median(mixed[mode]!.map((r) => r[0])))} tok/s`);
      row(`beside OCR, ${label}: OCR`, `${fmt(median(mixed[mode]!.map((r) => r[1])), 2)} pages/s`);
    }
    row('ratio auto / on beside OCR: chat, OCR', `${fmt(median(mixed.auto!.map((r) => r[0])) / median(mixed.on!.map((r) => r[0])), 3)}, ${fmt(median(mixed.auto!.map((r) => r[1])) / median(mixed.on!.map((r) => r[1])), 3)}`);
  } finally {
    if (saved === undefined) delete process.env.LSERVE_LLAMA_POLLING;
    else process.env.LSERVE_LLAMA_POLLING = saved;
    await server.close();
    await rm(home, { recursive: true, force: true });
  }
}

/** llama.cpp's own tools on the chat model, when built. */
async function llamacppSection(chatFile: string): Promise<void> {
  const serverBin = llamaBin(args['llama-bin'], 'llama-server');
  const benchBin = llamaBin(args['llama-bin'], 'llama-bench');
  console.log(`\nllama.cpp reference (${args['llama-bin']}):`);
  if (benchBin) row(`llama-bench tg${tokens}`, `${fmt(llamaBenchTg(benchBin, chatFile, threads, tokens))} tok/s`);
  if (serverBin) {
    // Single stream with one slot, as a user runs llama-server by default; -np 4 is measured beside lserve above.
    const ls = await startLlamaServer(serverBin, chatFile, { threads, parallel: 1, port: 18_001, contextPerSlot: 2048 });
    try {
      await streamChat(ls.url, chatBody('any'));
      const single: StreamTiming[] = [];
      for (let i = 0; i < runs; i++) single.push(await streamChat(ls.url, chatBody('any')));
      row('llama-server -np 1, 1 stream (stream, HTTP)', `${fmt(median(single.map(decodeRate)))} tok/s`, `TTFT ${fmt(median(single.map((r) => r.ttftMs)), 0)} ms`);
    } finally {
      await ls.stop();
    }
  }
  if (!serverBin && !benchBin) console.log('  (not built: see bench/text.md, "llama.cpp reference binaries")');
}

/**
 * Qwen3-Embedding-0.6B-sized: lserve over HTTP against node-llama-cpp direct
 * with lserve's own context shape (read from its plan line), each side in a
 * child process of its own, run after the other, alternated `runs` times.
 */
async function qwen3EmbedSection(): Promise<void> {
  const file = benchQwen3EmbeddingModel();
  const sizes = [1, 8, 32];
  const reps = 1;
  const started = performance.now();
  // Distinct texts: the load request, the warm-up (4) and each repetition's 1 + 8 + 32.
  const { lserve, direct, tokens } = await qwen3EmbedRounds(file, { threads, runs, sizes, reps, textCount: 5 + reps * sizes.reduce((a, b) => a + b, 0) });
  const plan = lserve[0]!;
  const shape = plan.shape;
  console.log(
    `\nEmbeddings, Qwen3-Embedding-0.6B-sized (qwen3, LAST pooling, Q8_0; inputs of ${Math.min(...tokens)}–${Math.max(...tokens)} tokens; ` +
      `each side in its own process, alternated, median of ${runs}; ${fmt((performance.now() - started) / 1000, 0)} s):`,
  );
  console.log(`  lserve's plan: ${plan.planLine?.replace(/^.*context plan: /, '')}`);
  console.log(`  direct: ${shape.contexts} × createEmbeddingContext({ contextSize: ${shape.contextSize}, batchSize: ${shape.batchSize}, threads: ${shape.threadsPerContext} }) (threads = floor(${threads} / contexts), as loadContextPool)`);
  const rate = (results: typeof lserve, size: number) => median(results.flatMap((r) => r.rates[size] ?? []));
  for (const size of sizes) {
    const label = `${size} input${size > 1 ? 's' : ''}`;
    const s = rate(lserve, size);
    const d = rate(direct, size);
    const cpu = (results: typeof lserve) => `CPU ${fmt(median(results.flatMap((r) => r.cpuMsPerInput[size] ?? [])), 0)} ms/input`;
    row(`lserve ${label}`, `${fmt(s, 2)} emb/s`, cpu(lserve));
    row(`direct ${label}`, `${fmt(d, 2)} emb/s`, cpu(direct));
    row(`ratio lserve / direct, ${label} (target ≥ 1.0)`, fmt(s / d, 2));
  }
  const mib = (bytes: number) => `${fmt(bytes / 2 ** 20, 0)} MiB`;
  const memory = (what: string, pick: (r: (typeof lserve)[number]) => number, note?: (r: (typeof lserve)[number]) => string) => {
    const s = median(lserve.map(pick));
    const d = median(direct.map(pick));
    const noteOf = (results: typeof lserve, value: number) => (note ? note(results.find((r) => pick(r) === value)!) : '');
    row(`lserve ${what}`, mib(s), noteOf(lserve, s));
    row(`direct ${what}`, mib(d), noteOf(direct, d));
    row(`ratio lserve / direct, ${what} (target ≤ 1.0)`, fmt(s / d, 3));
  };
  memory('RSS after load + warm-up', (r) => r.afterWarmup.rss, (r) => `anon ${mib(r.afterWarmup.rssAnon)}, file ${mib(r.afterWarmup.rssFile)}; ${mib(r.beforeLoad.rss)} before the load`);
  memory('peak RSS (maxRSS)', (r) => r.maxRssKiB * 1024);
  console.log(`  tokens per input evaluated by lserve (usage.prompt_tokens / inputs): ${fmt(median(lserve.map((r) => r.tokensPerInput ?? Number.NaN)), 1)}`);
}

await main();
