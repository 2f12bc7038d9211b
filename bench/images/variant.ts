/**
 * One benchmark variant in a process of its own (so peak memory is its own):
 * an engine on the given home, one warm-up image, then measured images
 * through the same task function the server and CLI use, decoded by the
 * model's own VAE or, when DECODER names one, by that latent decoder only
 * (so a TAESD process never holds the full VAE's activations and its peak
 * is what a user of TAESD alone sees). For each step count in STEPS (e.g.
 * `1,4`), REPS images; one JSON line per image: seconds for text encoding
 * (with the queue and setup), each UNet step, and decode + PNG; the peak
 * RSS so far of the process holding the model (its runner).
 *
 *   npx tsx bench/images/variant.ts HOME MODEL THREADS SIZE STEPS REPS [DECODER]
 */
import { Engine } from '../../src/compose.js';
import { generateImages, type ImageRequest } from '../../src/core/tasks/image.js';
import { peakResidentBytes } from '../../src/core/process-memory.js';

const [home, model, threads, size, steps, reps, decoder] = process.argv.slice(2);

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

/** Peak RSS of the process that holds the model: its runner (the server's way), or this process where the model runs in it. */
function peakRss(engine: Engine): number {
  const pid = engine.manager.loaded().find((m) => m.id === model)?.pid;
  return (pid === undefined ? undefined : peakResidentBytes(pid)) ?? process.resourceUsage().maxRSS * 1024;
}

async function main(): Promise<void> {
  const engine = new Engine({ home, threads: Number(threads), keepAliveMs: -1 });
  // Guidance 0: SD-Turbo's way (the synthetic export registered as a user's gets a generic model's 7.5, which doubles the UNet's work).
  const base: ImageRequest = { model, prompt: 'a lighthouse on a cliff at dusk, oil painting', size, seed: 1, guidanceScale: 0, ...(decoder ? { vae: decoder } : {}) };
  const loadStart = performance.now();
  // Loads the model (and the decoder): no measured image includes a load.
  await generateImages(engine, { ...base, steps: 1 });
  const warmup = (performance.now() - loadStart) / 1000;
  const loaded = engine.manager.loaded().find((m) => m.id === model);
  let first = true;
  for (const count of steps!.split(',').map(Number)) {
    for (let rep = 0; rep < Number(reps); rep++) {
      const measured = await measure(engine, { ...base, steps: count });
      const load = first ? { warmup, estimate: loaded?.memoryBytes } : {};
      first = false;
      console.log(JSON.stringify({ decoder: decoder || 'vae', stepCount: count, ...load, ...measured, peakRss: peakRss(engine) }));
    }
  }
  await engine.close();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
