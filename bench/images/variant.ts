/**
 * One benchmark variant in a process of its own (so peak memory is its own):
 * an engine on the given home, one warm-up image, then measured 512x512
 * images through the same task function the server and CLI use — with the
 * full VAE decoder, and with a tiny latent decoder when one is given. Prints
 * one JSON line per measured image: seconds for text encoding (with the
 * queue and setup), each UNet step, and decode + PNG; peak RSS so far.
 * Each kind of image is made REPS times, alternating full VAE and tiny
 * decoder, so the two see the same machine load.
 *
 *   npx tsx bench/images/variant.ts HOME MODEL THREADS SIZE STEPS REPS [TINY_VAE]
 */
import { Engine } from '../../src/compose.js';
import { generateImages, type ImageRequest } from '../../src/core/tasks/image.js';

const [home, model, threads, size, steps, reps, tiny] = process.argv.slice(2);

async function measure(engine: Engine, request: ImageRequest): Promise<{ text: number; steps: number[]; decode: number; total: number }> {
  const started = performance.now();
  let last = started;
  let text = 0;
  const stepTimes: number[] = [];
  await generateImages(engine, request, {
    onProgress: ({ step }) => {
      const now = performance.now();
      if (step === 0) text = (now - started) / 1000;
      else stepTimes.push((now - last) / 1000);
      last = now;
    },
  });
  const end = performance.now();
  return { text, steps: stepTimes, decode: (end - last) / 1000, total: (end - started) / 1000 };
}

const peakRss = () => process.resourceUsage().maxRSS * 1024;

async function main(): Promise<void> {
  const engine = new Engine({ home, threads: Number(threads), keepAliveMs: -1 });
  const base: ImageRequest = { model, prompt: 'a lighthouse on a cliff at dusk, oil painting', size, steps: Number(steps), seed: 1 };
  const loadStart = performance.now();
  await generateImages(engine, { ...base, steps: 1 });
  const warm = (performance.now() - loadStart) / 1000;
  const loaded = engine.manager.loaded().find((m) => m.id === model);
  if (tiny) {
    // Load the decoder first: no measured image includes a load.
    await generateImages(engine, { ...base, steps: 1, vae: tiny });
  }
  for (let rep = 0; rep < Number(reps); rep++) {
    const full = await measure(engine, base);
    console.log(JSON.stringify({ decoder: 'vae', warmup: warm, estimate: loaded?.memoryBytes, ...full, peakRss: peakRss() }));
    if (!tiny) continue;
    const fast = await measure(engine, { ...base, vae: tiny });
    console.log(JSON.stringify({ decoder: tiny, ...fast, peakRss: peakRss() }));
  }
  await engine.close();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
