/**
 * Peak memory and time of the VAE decoder, whole and tiled (not a test):
 * SD's VAE decoder at its real dimensions (128/256/512/512 channels, random
 * weights, fp32; generated once into bench/.cache/), one decode of SIZE×SIZE
 * pixels with lserve's session settings (memory pattern off, as for the
 * pipeline's graphs), either whole or through tiled-decode.ts with the
 * pipeline's default tiling. Prints one JSON line. Run each in a process of
 * its own (peak RSS is per process):
 *
 *   npx tsx bench/images/tiled-vae.ts whole|tiled [SIZE=768] [--threads 2]
 */
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as ort from 'onnxruntime-node';
import { decodeTiled, DEFAULT_TILING } from '../../src/families/stable-diffusion/tiled-decode.js';
import { ortSessionOptions } from '../../src/runtimes/onnx/session.js';
import { SD_VAE, vaeDecoder } from '../../test/fixtures/onnx/sd-turbo/vae.js';

const { values: args, positionals } = parseArgs({ allowPositionals: true, options: { threads: { type: 'string', default: '2' } } });
const [mode = 'tiled', size = '768'] = positionals;
const side = Number(size) / 8;
const gb = (bytes: number) => Number((bytes / 1e9).toFixed(2));
const peak = () => gb(process.resourceUsage().maxRSS * 1024);

async function main(): Promise<void> {
  const graph = fileURLToPath(new URL('../.cache/sd-vae-decoder-fp32.onnx', import.meta.url));
  if (!existsSync(graph)) {
    await mkdir(path.dirname(graph), { recursive: true });
    await writeFile(graph, vaeDecoder(SD_VAE, 'float32', 'random'));
  }
  const session = await ort.InferenceSession.create(graph, { ...ortSessionOptions({ threads: Number(args.threads) }), enableMemPattern: false });
  const created = peak();
  const latents = Float32Array.from({ length: 4 * side * side }, (_, i) => Math.sin(i * 12.9898) * 3);
  const decodeTile = async (tile: Float32Array, h: number, w: number) => (await session.run({ latent_sample: new ort.Tensor('float32', tile, [1, 4, h, w]) })).sample!.data as Float32Array;
  const tiling = mode === 'whole' ? { tile: side, overlap: 0 } : DEFAULT_TILING;
  const started = performance.now();
  await decodeTiled(latents, { channels: 4, height: side, width: side, factor: 8 }, tiling, decodeTile);
  const seconds = Number(((performance.now() - started) / 1000).toFixed(1));
  console.log(JSON.stringify({ mode, size: Number(size), tiling, seconds, peakAfterSession: created, peak: peak() }));
  await session.release();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
