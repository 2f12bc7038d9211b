/**
 * Images in chat (not a test): lserve beside llama.cpp's own server with
 * `--mmproj`, on the same vision GGUF pair and the same images, runs
 * alternated. Read the ratios of one run, not the absolute numbers.
 *
 *   npx tsx bench/chat-media.ts --model DIR [--threads 2] [--runs 4] [--tokens 64] [--size 336x336]
 *                               [--llama-bin /tmp/llama-build/build/bin] [--omp-passive]
 *
 * DIR holds model.gguf and mmproj.gguf. A random-weight Qwen2-VL-2B-sized
 * pair (1.6 + 1.3 GB, f16; `--bench-outtype q8_0` for a Q8_0 projector):
 *   python scripts/golden/qwen2_vl.py --bench DIR      (test/golden/qwen2-vl/README.md: the Python it needs)
 * llama-server: built from node-llama-cpp's bundled source (bench/text.md, "llama.cpp reference binaries").
 *
 * Each run sends one user turn, a new image (a synthetic drawing with one
 * pixel changed per run, so no side reuses an encoded image) and a short
 * question, streamed, greedy, the end tokens banned so that both sides
 * generate `--tokens`. Measured on the client, alike for both:
 * - image prompt processing: time to the first token (encoding the image,
 *   decoding its embeddings and the prompt's text);
 * - decode tok/s after the first token.
 * llama-server's OpenMP threads spin between its operations unless
 * `--omp-passive` (OMP_WAIT_POLICY=PASSIVE) is given.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import sharp from 'sharp';
import { Engine } from '../src/compose.js';
import { startServer } from '../src/http/server.js';
import { llamaBin, startLlamaServer } from './text/llamacpp.js';
import { decodeRate, streamChat, type StreamTiming } from './text/stream.js';

const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    runs: { type: 'string', default: '4' },
    tokens: { type: 'string', default: '64' },
    size: { type: 'string', default: '336x336' },
    'llama-bin': { type: 'string', default: '/tmp/llama-build/build/bin' },
    'omp-passive': { type: 'boolean', default: false },
  },
});
const dir = args.model;
if (!dir || !existsSync(path.join(dir, 'model.gguf')) || !existsSync(path.join(dir, 'mmproj.gguf'))) {
  console.error('--model DIR must hold model.gguf and mmproj.gguf (python scripts/golden/qwen2_vl.py --bench DIR)');
  process.exit(2);
}
const threads = Number(args.threads);
const runs = Number(args.runs);
const tokens = Number(args.tokens);
const [width, height] = args.size.split('x').map(Number) as [number, number];
const server = llamaBin(args['llama-bin'], 'llama-server');
if (!server) {
  console.error(`no llama-server in ${args['llama-bin']} (bench/text.md, "llama.cpp reference binaries": how to build it)`);
  process.exit(2);
}

/** Run i's image: the same drawing each time but for one pixel, as a PNG data URI. */
async function image(run: number): Promise<string> {
  const rgb = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const at = (y * width + x) * 3;
      rgb[at] = (x * 255) / width;
      rgb[at + 1] = (y * 255) / height;
      rgb[at + 2] = ((x + y) % 64) * 4;
    }
  }
  rgb[run * 3] = 255 - rgb[run * 3]!;
  const png = await sharp(rgb, { raw: { width, height, channels: 3 } }).png().toBuffer();
  return `data:image/png;base64,${png.toString('base64')}`;
}

/** The end-of-turn tokens of the model's vocabulary (Qwen2-VL: <|im_end|>, <|endoftext|>), banned on both sides. */
function endBias(): Record<string, number> {
  const header = readFileSync(path.join(dir!, 'model.gguf')).subarray(0, 64 << 20).toString('latin1');
  const bias: Record<string, number> = {};
  for (const [name, id] of [['<|im_end|>', 151645], ['<|endoftext|>', 151643]] as const) if (header.includes(name)) bias[id] = -100;
  return bias;
}

const body = (url: string) => ({
  model: 'vision',
  // A system message of its own: llama.cpp renders Qwen2-VL's template, which adds a default one when there is none.
  messages: [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'Describe this image.' }] }],
  max_tokens: tokens,
  temperature: 0,
  logit_bias: endBias(),
});

const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-media-'));
delete process.env.LSERVE_LLAMA_BUILD; // a fresh install's binary
const engine = new Engine({ home, threads, parallel: 1, log: () => {} });
const lserve = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 64 << 20, maxUploadBytes: 64 << 20, logFormat: 'text', log: () => {} });
await engine.store.registerLocal(path.join(dir, 'model.gguf'), { kind: 'chat', id: 'vision', mmproj: path.join(dir, 'mmproj.gguf') });
const llama = await startLlamaServer(server, path.join(dir, 'model.gguf'), {
  threads,
  parallel: 1,
  port: 18000 + Math.floor(Math.random() * 1000),
  contextPerSlot: 4096,
  args: ['--mmproj', path.join(dir, 'mmproj.gguf'), '--no-mmproj-offload'],
  env: args['omp-passive'] ? { OMP_WAIT_POLICY: 'PASSIVE' } : {},
});

const results: Record<'lserve' | 'llama', StreamTiming[]> = { lserve: [], llama: [] };
try {
  // One warm-up each: model load, compute buffers.
  await streamChat(lserve.url, body(await image(runs + 1)));
  await streamChat(llama.url, body(await image(runs + 2)));
  for (let run = 0; run < runs; run++) {
    const url = await image(run);
    for (const side of run % 2 ? (['llama', 'lserve'] as const) : (['lserve', 'llama'] as const)) {
      const timing = await streamChat(side === 'lserve' ? lserve.url : llama.url, body(url));
      results[side].push(timing);
      console.log(`run ${run + 1} ${side.padEnd(6)} prompt ${timing.promptTokens} tokens, first token ${timing.ttftMs.toFixed(0)} ms, decode ${decodeRate(timing).toFixed(1)} tok/s (${timing.tokens} tokens)`);
    }
  }
} finally {
  await llama.stop();
  await lserve.close();
  await engine.close();
  await rm(home, { recursive: true, force: true });
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const ttft = { lserve: median(results.lserve.map((t) => t.ttftMs)), llama: median(results.llama.map((t) => t.ttftMs)) };
const decode = { lserve: median(results.lserve.map(decodeRate)), llama: median(results.llama.map(decodeRate)) };
console.log(`\n${width}x${height} image, ${threads} threads, ${runs} runs, medians (llama-server${args['omp-passive'] ? ', OMP_WAIT_POLICY=PASSIVE' : ''}):`);
console.log(`  image prompt processing  lserve ${ttft.lserve.toFixed(0)} ms   llama-server ${ttft.llama.toFixed(0)} ms   speed ratio ${(ttft.llama / ttft.lserve).toFixed(2)}`);
console.log(`  decode                   lserve ${decode.lserve.toFixed(1)} tok/s   llama-server ${decode.llama.toFixed(1)} tok/s   ratio ${(decode.lserve / decode.llama).toFixed(2)}`);
