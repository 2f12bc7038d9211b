// Builds the threadpool addon for this machine now, with every step shown — what `lserve serve`
// does once in the background where no shipped addon applies (src/runtimes/llama/threadpool-addon.ts).
// Retries a build that failed before.
// Usage: npm run build:llama             (LSERVE_HOME picks the home, as for lserve)
//        npm run build:llama -- --ship   builds in a scratch home and writes the result to
//                                        prebuilds/<platform>-<arch>/ (shipped-addon.ts), for a commit
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { defaultHome } from '../src/core/store.js';
import { shippedDir, type ShippedRecord } from '../src/runtimes/llama/shipped-addon.js';
import { addonKey, addonSources, buildThreadpoolAddon, findThreadpoolAddon, missingBuildTools } from '../src/runtimes/llama/threadpool-addon.js';

const ship = process.argv.includes('--ship');
const home = ship ? await mkdtemp(path.join(os.tmpdir(), 'lserve-ship-')) : defaultHome();
const missing = await missingBuildTools();
if (missing.length > 0) {
  console.error(`cannot build the threadpool addon: missing ${missing.join(', ')}`);
  process.exit(1);
}
const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(0).padStart(4);
const addon = await buildThreadpoolAddon(home, (step) => console.log(`${seconds()} s  ${step}`));
if (findThreadpoolAddon(home) !== addon) throw new Error(`built ${addon}, but lserve would not find it`);
if (!ship) {
  console.log(`${seconds()} s  built ${addon}: GGUF models use it from the next load (LSERVE_LLAMA_BUILD=prebuilt turns it off)`);
} else {
  const target = shippedDir();
  await mkdir(target, { recursive: true });
  await copyFile(addon, path.join(target, 'llama-addon.node'));
  const bytes = await readFile(addon);
  const record: ShippedRecord = {
    key: addonKey(addonSources()!),
    nodeLlamaCpp: addonSources()!.nodeLlamaCppVersion,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    compiler: execFileSync(process.env.CXX || 'c++', ['--version'], { encoding: 'utf8' }).split('\n')[0]!,
    glibc: newestGlibc(addon),
    builtAt: new Date().toISOString(),
  };
  await writeFile(path.join(target, 'llama-addon.json'), `${JSON.stringify(record, null, 2)}\n`);
  await rm(home, { recursive: true, force: true });
  console.log(`${seconds()} s  wrote ${target} (${(bytes.length / 1e6).toFixed(2)} MB, needs glibc ${record.glibc}); commit it`);
}

/** The newest GLIBC_x.y symbol version the addon needs: the oldest system it loads on. */
function newestGlibc(file: string): string {
  const versions = execFileSync('objdump', ['-T', file], { encoding: 'utf8' }).match(/GLIBC_\d+(\.\d+)+/g) ?? [];
  const parse = (v: string) => v.slice('GLIBC_'.length).split('.').map(Number);
  const newest = versions.sort((a, b) => {
    const [x, y] = [parse(a), parse(b)];
    for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
    return 0;
  }).at(-1);
  return newest?.slice('GLIBC_'.length) ?? 'unknown';
}
