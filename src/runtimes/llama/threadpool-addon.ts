import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { cp, mkdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { run, succeeds } from './build-process.js';
import { buildCpuVariants, CPU_VARIANT_RECIPE } from './cpu-variant-build.js';

/**
 * The threadpool addon: node-llama-cpp's own N-API addon, recompiled with
 * threadpool.patch (one persistent, spin-polling CPU threadpool
 * per context, as llama.cpp's own tools attach) and linked against the
 * prebuilt llama.cpp libraries already installed. The prebuilt addon lets
 * ggml start and join a fresh threadpool for every decode, which costs
 * ≈ 20 % of single-stream speed (bench/text.md).
 *
 * It also carries lserve's binding of llama.cpp's multimodal library
 * (lserveMtmd.cpp: images and audio in chat, runtimes/llama/mtmd.ts), with
 * that library's own sources (tools/mtmd, vendor/hash) compiled in, and its
 * read of log-probabilities from the logits (lserveLogprobs.cpp,
 * runtimes/llama/native-logprobs.ts), and its decode of a model from input
 * embeddings instead of tokens (lserveEmbedDecode.cpp,
 * runtimes/llama/embed-decoder.ts).
 *
 * Only the addon's ≈ 20 C++ files and libmtmd's ≈ 55 are compiled — about
 * two minutes on 2 cores, never the rest of llama.cpp — from the sources
 * node-llama-cpp ships (its addon folder, and its bundled llama.cpp git
 * bundle). It needs a C++ compiler, git and Node's headers. Some of
 * llama.cpp's CPU variants may be built with it, with cmake
 * (cpu-variant-build.ts): the shipped addon's are. The result lives under the lserve home,
 * keyed by everything it was built from, so an upgrade of node-llama-cpp
 * builds afresh. Where lserve ships the addon for the platform
 * (shipped-addon.ts), the shipped file is put in the same place instead and
 * nothing is compiled.
 */

const PATCH = fileURLToPath(new URL('../../../scripts/llama/threadpool.patch', import.meta.url));
/** lserve's own bindings, copied into the addon folder (the patch registers them): libmtmd, the read of log-probabilities, the decode from embeddings. */
const BINDINGS = ['lserveMtmd.cpp', 'lserveLogprobs.cpp', 'lserveEmbedDecode.cpp'].map((file) => fileURLToPath(new URL(`../../../scripts/llama/${file}`, import.meta.url)));
/** What the build reads from the bundled llama.cpp source: the headers the addon includes, libmtmd's sources. */
const SOURCE_DIRS = ['include', 'common', 'ggml/include', 'src', 'vendor', 'tools/mtmd'];
/** The prebuilt CPU variants are loaded by ggml at run time; the addon links the rest. */
const CPU_VARIANT = /^libggml-cpu-.*\.so$/;

export interface AddonSources {
  /** node-llama-cpp's `llama/` folder: addon sources and gitRelease.bundle. */
  llamaDir: string;
  /** The prebuilt CPU-only binaries folder (addon, libllama, libggml*, CPU variants). */
  binsDir: string;
  nodeLlamaCppVersion: string;
}

/** Where node-llama-cpp and its CPU-only prebuilt binaries for this platform are; undefined when not installed. */
export function addonSources(): AddonSources | undefined {
  try {
    // Both packages export only their entry (dist/index.js); their folders are one level up.
    const packageJson = fileURLToPath(new URL('../package.json', import.meta.resolve('node-llama-cpp')));
    const target = `${process.platform === 'darwin' ? 'mac' : process.platform}-${process.arch}`;
    const binsDir = path.join(path.dirname(createRequire(packageJson).resolve(`@node-llama-cpp/${target}`)), '..', 'bins', target);
    const llamaDir = path.join(path.dirname(packageJson), 'llama');
    if (!existsSync(path.join(binsDir, 'llama-addon.node')) || !existsSync(path.join(llamaDir, 'addon'))) return undefined;
    const { version } = JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string };
    return { llamaDir, binsDir, nodeLlamaCppVersion: version };
  } catch {
    return undefined;
  }
}

const keys = new Map<string, string>();

/**
 * A hash of what the addon is built from: node-llama-cpp's version, its
 * prebuilt addon, the patch, lserve's bindings and the recipe of its
 * own CPU variants (cpu-variant-build.ts). Computed once per process (every GGUF load
 * asks): an installed package does not change under a running process.
 */
export function addonKey(sources: AddonSources): string {
  const known = keys.get(sources.binsDir);
  if (known) return known;
  const key = hashSources(sources);
  keys.set(sources.binsDir, key);
  return key;
}

function hashSources(sources: AddonSources): string {
  const hash = createHash('sha256');
  hash.update(`${sources.nodeLlamaCppVersion}\0${process.platform}-${process.arch}\0`);
  hash.update(readFileSync(path.join(sources.binsDir, 'llama-addon.node')));
  hash.update(readFileSync(PATCH));
  for (const binding of BINDINGS) hash.update(readFileSync(binding));
  hash.update(CPU_VARIANT_RECIPE);
  return hash.digest('hex').slice(0, 16);
}

export function addonDir(home: string, key: string): string {
  return path.join(home, 'llama', `threadpool-addon-${key}`);
}

export interface BuildRecord {
  key: string;
  nodeLlamaCpp: string;
  builtAt: string;
  /** How long the build took here; absent for an addon shipped with lserve. */
  seconds?: number;
  /** Copied from the addon shipped with lserve (shipped-addon.ts), not compiled here. */
  shipped?: true;
  /** The CPU variants lserve built (here, or for the shipped addon) in place of node-llama-cpp's; absent: all prebuilt. */
  cpuVariants?: string[];
}

/**
 * The built addon's path, when a complete build for these sources exists and
 * every library it links still resolves (the prebuilt folder may have moved
 * with node_modules).
 */
export function findThreadpoolAddon(home: string, sources = addonSources()): string | undefined {
  if (!sources || process.platform !== 'linux') return undefined;
  try {
    const key = addonKey(sources);
    const dir = addonDir(home, key);
    const record = JSON.parse(readFileSync(path.join(dir, 'build.json'), 'utf8')) as BuildRecord;
    if (record.key !== key) return undefined;
    for (const name of readdirSync(dir)) if (name.endsWith('.so')) statSync(path.join(dir, name)); // throws on a dangling link
    return path.join(dir, 'llama-addon.node');
  } catch {
    return undefined;
  }
}

/** What a build needs that this machine lacks (empty: it can build). */
export async function missingBuildTools(env = process.env): Promise<string[]> {
  const missing: string[] = [];
  if (process.platform !== 'linux') missing.push(`linux (this is ${process.platform})`);
  if (!(await succeeds(compiler(env), ['--version']))) missing.push(`a C++ compiler (${compiler(env)}; set CXX)`);
  if (!(await succeeds('git', ['--version']))) missing.push('git');
  if (!nodeHeaders()) missing.push("Node's C headers (node_api.h)");
  return missing;
}

export type BuildProgress = (message: string) => void;

/**
 * Builds the addon into the lserve home and returns its path. Runs the
 * compiler in child processes at low priority (the event loop stays free and
 * a server keeps serving); the folder appears whole or not at all.
 * `cpuVariants`: the CPU variants to build from llama.cpp's source too
 * (cpu-variant-build.ts; needs cmake) in place of node-llama-cpp's.
 */
export async function buildThreadpoolAddon(home: string, progress: BuildProgress = () => {}, sources = addonSources(), cpuVariants: readonly string[] = []): Promise<string> {
  if (!sources) throw new Error("node-llama-cpp's prebuilt binaries for this platform are not installed");
  const missing = await missingBuildTools();
  if (missing.length > 0) throw new Error(`cannot build: missing ${missing.join(', ')}`);
  const started = Date.now();
  const key = addonKey(sources);
  const finalDir = addonDir(home, key);
  await mkdir(path.dirname(finalDir), { recursive: true });
  const work = `${finalDir}.tmp-${process.pid}`;
  // What a build interrupted by the process's end left behind.
  for (const stale of readdirSync(path.dirname(finalDir), { withFileTypes: true }).filter((e) => e.name.startsWith(`${path.basename(finalDir)}.tmp-`))) {
    await rm(path.join(path.dirname(finalDir), stale.name), { recursive: true, force: true });
  }
  await mkdir(work, { recursive: true });
  try {
    progress('reading llama.cpp headers from the bundled source');
    const source = path.join(work, 'llama.cpp');
    await run('git', ['clone', '--quiet', '--no-checkout', path.join(sources.llamaDir, 'gitRelease.bundle'), source]);
    await run('git', ['-C', source, 'checkout', '--quiet', 'HEAD', '--', ...SOURCE_DIRS]);

    const addon = path.join(work, 'addon-src');
    await cp(path.join(sources.llamaDir, 'addon'), path.join(addon, 'llama', 'addon'), { recursive: true });
    // Its own repository, so that git applies the patch here even when the home lies inside another work tree.
    await run('git', ['init', '--quiet'], addon);
    await run('git', ['apply', '-p1', PATCH], addon);
    for (const binding of BINDINGS) await cp(binding, path.join(addon, 'llama', 'addon', path.basename(binding)));

    const includes = [nodeHeaders()!, nodeAddonApiDir(sources), source, ...SOURCE_DIRS.map((d) => path.join(source, d))].map((d) => `-I${d}`);
    const addonFlags = ['-O2', '-DNDEBUG', '-fPIC', '-std=c++17', '-fexceptions', '-DNAPI_VERSION=7', ...includes];
    const units = [...listSources(path.join(addon, 'llama', 'addon')).map((file) => ({ file, flags: addonFlags })), ...mtmdUnits(source)];
    const objects: string[] = [];
    let done = 0;
    await inParallel(units, os.availableParallelism(), async ({ file, flags }) => {
      const object = path.join(work, `${objects.length}-${path.basename(file).replace(/\.\w+$/, '')}.o`);
      objects.push(object);
      await run(compiler(), ['-c', ...flags, file, '-o', object], undefined, true);
      progress(`compiled ${++done}/${units.length} sources`);
    });

    const libraries = readdirSync(sources.binsDir).filter((f) => f.endsWith('.so') && !CPU_VARIANT.test(f));
    // Linked as the prebuilt addon is: its libraries found beside it ($ORIGIN), the system's C++ runtime
    // (which those libraries load anyway), no symbols — small enough to ship (shipped-addon.ts).
    await run(compiler(), ['-shared', '-s', '-o', path.join(work, 'llama-addon.node'), ...objects, `-L${sources.binsDir}`, ...libraries.map((l) => `-l:${l}`), '-Wl,-rpath,$ORIGIN', '-pthread']);
    if (cpuVariants.length > 0) {
      progress(`building the CPU variants ${cpuVariants.join(', ')} with cmake`);
      await run('git', ['-C', source, 'checkout', '--quiet', 'HEAD', '--', '.']); // CMake configures the whole tree
      await buildCpuVariants(source, path.join(work, 'cpu-build'), work, cpuVariants, progress);
      await rm(path.join(work, 'cpu-build'), { recursive: true, force: true });
    }
    await rm(source, { recursive: true, force: true });
    await rm(addon, { recursive: true, force: true });
    for (const object of objects) await rm(object, { force: true });
    const record: BuildRecord = { key, nodeLlamaCpp: sources.nodeLlamaCppVersion, builtAt: new Date().toISOString(), seconds: Math.round((Date.now() - started) / 1000) };
    await publishAddonDir(work, finalDir, sources, cpuVariants.length > 0 ? { ...record, cpuVariants: [...cpuVariants] } : record);
    return path.join(finalDir, 'llama-addon.node');
  } catch (error) {
    await rm(work, { recursive: true, force: true });
    throw error;
  }
}

/**
 * Completes a folder holding llama-addon.node, and lserve's own CPU variants
 * if any — the prebuilt libraries linked in beside it but for those (ggml
 * loads the CPU variants from the addon's folder), their build description,
 * the record — and moves it into place whole.
 */
export async function publishAddonDir(work: string, finalDir: string, sources: AddonSources, record: BuildRecord): Promise<void> {
  for (const name of readdirSync(sources.binsDir).filter((f) => f.endsWith('.so') && !existsSync(path.join(work, f)))) await symlink(path.join(sources.binsDir, name), path.join(work, name));
  await cp(path.join(sources.binsDir, '_nlcBuildMetadata.json'), path.join(work, '_nlcBuildMetadata.json'));
  await writeFile(path.join(work, 'build.json'), `${JSON.stringify(record, null, 2)}\n`);
  await rm(finalDir, { recursive: true, force: true });
  await rename(work, finalDir);
}

/** The prebuilt binaries' build description, which node-llama-cpp reads for the addon it loads. */
export async function buildMetadataOf(addonPath: string): Promise<unknown> {
  return JSON.parse(await readFile(path.join(path.dirname(addonPath), '_nlcBuildMetadata.json'), 'utf8'));
}

/**
 * libmtmd's compile units, as its CMake files list them (tools/mtmd's
 * `add_library(mtmd …)`, vendor/hash's sources): read from the bundled
 * source, so that a node-llama-cpp upgrade that adds a model file builds it.
 */
export function mtmdUnits(source: string): Array<{ file: string; flags: string[] }> {
  const mtmd = path.join(source, 'tools', 'mtmd');
  const listed = /add_library\(mtmd\s([^)]*)\)/.exec(readFileSync(path.join(mtmd, 'CMakeLists.txt'), 'utf8'))?.[1];
  const files = listed?.split(/\s+/).filter((f) => f.endsWith('.cpp')) ?? [];
  if (files.length === 0) throw new Error(`no libmtmd sources listed in ${path.join(mtmd, 'CMakeLists.txt')}`);
  const common = ['-O2', '-DNDEBUG', '-fPIC', '-pthread'];
  const hash = path.join(source, 'vendor', 'hash');
  const includes = ['tools/mtmd', 'include', 'ggml/include', 'vendor'].map((d) => `-I${path.join(source, d)}`);
  return [
    ...files.map((f) => ({ file: path.join(mtmd, f), flags: [...common, '-std=c++17', '-Wno-cast-qual', ...includes] })),
    { file: path.join(hash, 'hash.cpp'), flags: [...common, '-std=c++17', `-I${hash}`, ...includes] },
    // Third-party C, warnings off as its CMake file has them; sha1.c is C++ there (it lives in a namespace).
    ...['xxhash/xxhash.c', 'sha256/sha256.c'].map((f) => ({ file: path.join(hash, f), flags: [...common, '-x', 'c', '-w', `-I${hash}`] })),
    { file: path.join(hash, 'sha1', 'sha1.c'), flags: [...common, '-x', 'c++', '-std=c++17', '-w', `-I${hash}`] },
  ];
}

function compiler(env = process.env): string {
  return env.CXX || 'c++';
}

function nodeHeaders(): string | undefined {
  const candidates = [path.join(path.dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node', '/usr/local/include/node'];
  return candidates.find((dir) => existsSync(path.join(dir, 'node_api.h')));
}

function nodeAddonApiDir(sources: AddonSources): string {
  return path.dirname(createRequire(path.join(sources.llamaDir, '..', 'package.json')).resolve('node-addon-api/package.json'));
}

function listSources(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.cpp'))
    .map((f) => path.join(dir, f))
    .sort();
}

async function inParallel<T>(items: readonly T[], jobs: number, work: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  await Promise.all(Array.from({ length: Math.max(1, Math.min(jobs, queue.length)) }, async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await work(item);
  }));
}
