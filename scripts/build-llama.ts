// Builds the threadpool addon for this machine now, with every step shown — what `lserve serve`
// does once in the background where no shipped addon applies (src/runtimes/llama/threadpool-addon.ts) —
// and on linux-x64, where cmake is installed, lserve's own CPU variants with it (cpu-variant-build.ts),
// which the background build leaves to node-llama-cpp. Retries a build that failed before.
// Usage: npm run build:llama             (LSERVE_HOME picks the home, as for lserve)
//        npm run build:llama -- --ship   builds in a scratch home and writes the result to
//                                        prebuilds/<platform>-<arch>/ (shipped-addon.ts), for a commit
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { defaultHome } from '../src/core/store.js';
import { BUILT_CPU_VARIANTS, buildsCpuVariants, missingCpuVariantTools } from '../src/runtimes/llama/cpu-variant-build.js';
import { sha256File, shippedDir, type ShippedRecord } from '../src/runtimes/llama/shipped-addon.js';
import { addonKey, addonSources, buildThreadpoolAddon, findThreadpoolAddon, missingBuildTools } from '../src/runtimes/llama/threadpool-addon.js';

const ship = process.argv.includes('--ship');
const home = ship ? await mkdtemp(path.join(os.tmpdir(), 'lserve-ship-')) : defaultHome();
const missing = await missingBuildTools();
const missingForVariants = buildsCpuVariants() ? await missingCpuVariantTools() : [];
if (missing.length > 0 || (ship && missingForVariants.length > 0)) {
  console.error(`cannot build the threadpool addon: missing ${[...missing, ...(ship ? missingForVariants : [])].join(', ')}`);
  process.exit(1);
}
const cpuVariants = buildsCpuVariants() && missingForVariants.length === 0 ? BUILT_CPU_VARIANTS : [];
if (buildsCpuVariants() && cpuVariants.length === 0) {
  console.log(`missing ${missingForVariants.join(', ')}: the addon uses node-llama-cpp's prebuilt CPU variants, whose f16 kernels are slower than the shipped addon's own (docs/llama-binary.md)`);
}
const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(0).padStart(4);
const addon = await buildThreadpoolAddon(home, (step) => console.log(`${seconds()} s  ${step}`), addonSources(), cpuVariants);
if (findThreadpoolAddon(home) !== addon) throw new Error(`built ${addon}, but lserve would not find it`);
if (!ship) {
  console.log(`${seconds()} s  built ${addon}: GGUF models use it from the next load (LSERVE_LLAMA_BUILD=prebuilt turns it off)`);
} else {
  const sources = addonSources()!;
  const target = shippedDir();
  await mkdir(target, { recursive: true });
  // Variants no longer built must not linger beside the record.
  for (const stale of readdirSync(target).filter((f) => /^libggml-cpu-.+\.so$/.test(f))) await rm(path.join(target, stale));
  const files = ['llama-addon.node', ...cpuVariants.map((v) => `libggml-cpu-${v}.so`)].map((name) => path.join(path.dirname(addon), name));
  for (const file of files.slice(1)) checkLinksPrebuiltBase(file, path.join(sources.binsDir, 'libggml-base.so'));
  for (const file of files) await copyFile(file, path.join(target, path.basename(file)));
  const record: ShippedRecord = {
    key: addonKey(sources),
    nodeLlamaCpp: sources.nodeLlamaCppVersion,
    sha256: await sha256File(addon),
    cpuVariants: Object.fromEntries(await Promise.all(cpuVariants.map(async (v, i) => [v, await sha256File(files[i + 1]!)]))),
    compiler: execFileSync(process.env.CXX || 'c++', ['--version'], { encoding: 'utf8' }).split('\n')[0]!,
    glibc: newestVersion(files.flatMap((file) => symbolVersions(file, 'GLIBC'))),
    builtAt: new Date().toISOString(),
  };
  await writeFile(path.join(target, 'llama-addon.json'), `${JSON.stringify(record, null, 2)}\n`);
  await rm(home, { recursive: true, force: true });
  const megabytes = async (file: string) => (await stat(path.join(target, path.basename(file)))).size / 1e6;
  const sizes = await Promise.all(files.map(megabytes));
  console.log(`${seconds()} s  wrote ${target}: llama-addon.node ${sizes[0]!.toFixed(2)} MB, ${cpuVariants.length} CPU variants ${sizes.slice(1).reduce((a, b) => a + b, 0).toFixed(2)} MB; needs glibc ${record.glibc}; commit it`);
}

/**
 * A variant must load beside node-llama-cpp's libggml-base.so: need it by that
 * name (not a versioned one) and call nothing it lacks (built from another
 * source, it would).
 */
function checkLinksPrebuiltBase(variant: string, base: string): void {
  const needed = [...execFileSync('objdump', ['-p', variant], { encoding: 'utf8' }).matchAll(/NEEDED\s+(\S+)/g)].map((m) => m[1]);
  if (!needed.includes(path.basename(base))) throw new Error(`${variant} does not link ${path.basename(base)} (it needs ${needed.join(', ')})`);
  const defined = new Set(dynamicSymbols(base).filter((s) => !s.undefined).map((s) => s.name));
  const lacking = dynamicSymbols(variant).filter((s) => s.undefined && s.name.startsWith('ggml') && !defined.has(s.name));
  if (lacking.length > 0) throw new Error(`${variant} calls what ${base} lacks: ${lacking.map((s) => s.name).join(', ')}`);
}

function dynamicSymbols(file: string): Array<{ name: string; undefined: boolean }> {
  return execFileSync('objdump', ['-T', file], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /\s(\*UND\*|\.\S+)\s+\S+\s+(?:\S+\s+)?(\S+)$/.exec(line))
    .filter((m) => m !== null)
    .map((m) => ({ name: m[2]!, undefined: m[1] === '*UND*' }));
}

/** The `prefix`_x.y symbol versions a file needs (objdump -T). */
function symbolVersions(file: string, prefix: string): string[] {
  return (execFileSync('objdump', ['-T', file], { encoding: 'utf8' }).match(new RegExp(`${prefix}_\\d+(\\.\\d+)+`, 'g')) ?? []).map((v) => v.slice(prefix.length + 1));
}

/** The newest of dotted versions: the oldest system the files load on. */
function newestVersion(versions: string[]): string {
  const parse = (v: string) => v.split('.').map(Number);
  const newest = versions.sort((a, b) => {
    const [x, y] = [parse(a), parse(b)];
    for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
    return 0;
  }).at(-1);
  return newest ?? 'unknown';
}
