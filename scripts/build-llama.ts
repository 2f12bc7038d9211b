// Builds the threadpool addon for this machine now, with every step shown — what `lserve serve`
// does once in the background (src/runtimes/llama/threadpool-addon.ts). Retries a build that failed before.
// Usage: npm run build:llama            (LSERVE_HOME picks the home, as for lserve)
import { defaultHome } from '../src/core/store.js';
import { buildThreadpoolAddon, findThreadpoolAddon, missingBuildTools } from '../src/runtimes/llama/threadpool-addon.js';

const home = defaultHome();
const missing = await missingBuildTools();
if (missing.length > 0) {
  console.error(`cannot build the threadpool addon: missing ${missing.join(', ')}`);
  process.exit(1);
}
const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(0).padStart(4);
const addon = await buildThreadpoolAddon(home, (step) => console.log(`${seconds()} s  ${step}`));
if (findThreadpoolAddon(home) !== addon) throw new Error(`built ${addon}, but lserve would not find it`);
console.log(`${seconds()} s  built ${addon}: GGUF models use it from the next load (LSERVE_LLAMA_BUILD=prebuilt turns it off)`);
