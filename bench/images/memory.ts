/**
 * Where one graph's memory goes (not a test): an ONNX Runtime session on one
 * Stable Diffusion graph, made with lserve's session settings plus the
 * memory settings given, then run once or more at 512×512. Prints one JSON
 * line: resident memory (RSS) after the session is made and after the runs,
 * the process's peak, and the seconds each took. Run each setting in a
 * process of its own (peak RSS is per process):
 *
 *   npx tsx bench/images/memory.ts GRAPH ROLE [--arena 0|1] [--pattern 0|1] [--prepack 0|1] [--from path|buffer] [--runs 2]
 *
 * ROLE is text_encoder, unet, vae_decoder or vae_encoder (it picks the inputs).
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { ortSessionOptions } from '../../src/runtimes/onnx/session.js';

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    arena: { type: 'string', default: '1' },
    pattern: { type: 'string', default: '1' },
    prepack: { type: 'string', default: '1' },
    from: { type: 'string', default: 'path' },
    runs: { type: 'string', default: '1' },
    threads: { type: 'string', default: '2' },
    size: { type: 'string', default: '512' },
  },
});
const [graph, role] = positionals as [string, string];
const side = Number(args.size) / 8;

const gb = (bytes: number) => Number((bytes / 1e9).toFixed(2));
const rss = () => gb(process.memoryUsage.rss());
const peak = () => gb(process.resourceUsage().maxRSS * 1024);

function feeds(): Record<string, ort.Tensor> {
  const random = (n: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898) * 0.5);
  switch (role) {
    case 'text_encoder':
      return { input_ids: new ort.Tensor('int32', Int32Array.from({ length: 77 }, (_, i) => (i === 0 ? 49406 : i < 10 ? 320 + i : 49407)), [1, 77]) };
    case 'unet':
      return {
        sample: new ort.Tensor('float32', random(4 * side * side), [1, 4, side, side]),
        timestep: new ort.Tensor('int64', BigInt64Array.of(999n), [1]),
        encoder_hidden_states: new ort.Tensor('float32', random(77 * 1024), [1, 77, 1024]),
      };
    case 'vae_decoder':
      return { latent_sample: new ort.Tensor('float32', random(4 * side * side), [1, 4, side, side]) };
    case 'vae_encoder':
      return { sample: new ort.Tensor('float32', random(3 * 64 * side * side), [1, 3, 8 * side, 8 * side]) };
    default:
      throw new Error(`unknown role ${role}`);
  }
}

async function main(): Promise<void> {
  const base = ortSessionOptions({ threads: Number(args.threads) });
  const options: ort.InferenceSession.SessionOptions = {
    ...base,
    enableCpuMemArena: args.arena === '1',
    enableMemPattern: args.pattern === '1',
    extra: { session: { ...base.extra.session, ...(args.prepack === '1' ? {} : { disable_prepacking: '1' }) } },
  };
  const before = rss();
  let started = performance.now();
  const session = args.from === 'buffer' ? await ort.InferenceSession.create(await readFile(graph), options) : await ort.InferenceSession.create(graph, options);
  const create = (performance.now() - started) / 1000;
  const created = { rss: rss(), peak: peak() };
  const runs: number[] = [];
  for (let i = 0; i < Number(args.runs); i++) {
    started = performance.now();
    await session.run(feeds());
    runs.push(Number(((performance.now() - started) / 1000).toFixed(2)));
  }
  console.log(JSON.stringify({ role, ...args, before, create: Number(create.toFixed(1)), created, run: runs, after: { rss: rss(), peak: peak() } }));
  await session.release();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
