import { readFileSync } from 'node:fs';
import { copyFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { run, succeeds } from './build-process.js';

/**
 * lserve's own builds of llama.cpp's CPU variants (cpu-variants.ts), for the
 * threadpool addon's folder. node-llama-cpp's prebuilt variants are compiled
 * by GCC 11, whose f16 kernels are slow: an f16 image projector encodes
 * 2.25× slower with its libggml-cpu-zen4.so than with the same source built
 * by GCC 12 (bench/chat-media.md). These are built from the llama.cpp source
 * node-llama-cpp bundles, with its release build's options, by the compiler
 * at hand, and replace the prebuilt files of the same names; the other
 * variants stay node-llama-cpp's, and ggml still keeps whichever variant in
 * the folder fits the CPU best. Only the variants are built: they link the
 * prebuilt libggml-base.so, whose ABI is the same source's. ggml-cpu.patch
 * changes one kernel of theirs (docs/llama-binary.md, "Own CPU variants").
 */

/** Which variants lserve builds, and why these: docs/llama-binary.md ("Own CPU variants"). */
export const BUILT_CPU_VARIANTS: readonly string[] = ['haswell', 'skylakex', 'cascadelake', 'icelake', 'zen4', 'alderlake', 'sapphirerapids'];

const CMAKE_OPTIONS = [
  'CMAKE_BUILD_TYPE=Release',
  // node-llama-cpp's release build (compileLLamaCpp.js in CI mode): every x86 level as a variant loaded at run time, no OpenMP.
  'GGML_BACKEND_DL=ON',
  'GGML_CPU_ALL_VARIANTS=ON',
  'GGML_NATIVE=OFF',
  'GGML_OPENMP=OFF',
  'GGML_CCACHE=OFF',
  'BUILD_SHARED_LIBS=ON',
  // Its llama/CMakeLists.txt: libraries named without a version, so the variants need `libggml-base.so`, the prebuilt one's name.
  'CMAKE_PLATFORM_NO_VERSIONED_SONAME=ON',
  'CMAKE_POSITION_INDEPENDENT_CODE=ON',
  // Found beside the addon ($ORIGIN) and nowhere in the build folder; no symbols (small enough to ship).
  'CMAKE_BUILD_WITH_INSTALL_RPATH=ON',
  'CMAKE_INSTALL_RPATH=$ORIGIN',
  'CMAKE_MODULE_LINKER_FLAGS=-s',
  // Nothing else of llama.cpp is built: none of its network, tools or tests.
  'LLAMA_CURL=OFF',
  'LLAMA_HTTPLIB=OFF',
  'LLAMA_OPENSSL=OFF',
  'LLAMA_BUILD_BORINGSSL=OFF',
  'LLAMA_BUILD_COMMON=OFF',
  'LLAMA_BUILD_TESTS=OFF',
  'LLAMA_BUILD_TOOLS=OFF',
  'LLAMA_BUILD_EXAMPLES=OFF',
  'LLAMA_BUILD_SERVER=OFF',
];

/** lserve's change to the variants' source: a 512-bit GEMV for 4-bit weights (docs/llama-binary.md). */
const GGML_CPU_PATCH = fileURLToPath(new URL('../../../scripts/llama/ggml-cpu.patch', import.meta.url));

/** What the variants are built from beyond llama.cpp's source, for the addon's key (addonKey). */
export const CPU_VARIANT_RECIPE = `${BUILT_CPU_VARIANTS.join(',')}\0${CMAKE_OPTIONS.join('\0')}\0${readFileSync(GGML_CPU_PATCH, 'utf8')}`;

/** Whether this platform has variants lserve builds: ggml's x86 levels, on Linux. */
export function buildsCpuVariants(): boolean {
  return process.platform === 'linux' && process.arch === 'x64';
}

/** What building the variants needs beyond the addon's tools (empty: it can build them). */
export async function missingCpuVariantTools(): Promise<string[]> {
  return (await succeeds('cmake', ['--version'])) ? [] : ['cmake'];
}

/**
 * Patches llama.cpp's full checkout `source` (a git clone) with
 * ggml-cpu.patch, configures it in `build` and builds each
 * variant there, at low priority, into `dest` as libggml-cpu-<variant>.so.
 */
export async function buildCpuVariants(source: string, build: string, dest: string, variants: readonly string[], progress: (message: string) => void): Promise<void> {
  await run('git', ['-C', source, 'apply', '-p1', GGML_CPU_PATCH]);
  await run('cmake', ['-S', source, '-B', build, ...CMAKE_OPTIONS.map((option) => `-D${option}`)], undefined, true);
  const target = async (name: string) => {
    const started = Date.now();
    await run('cmake', ['--build', build, '--target', name, '--parallel', String(os.availableParallelism())], undefined, true);
    return Math.round((Date.now() - started) / 1000);
  };
  // What the variants link against while building; the prebuilt one of the same source is used at run time.
  progress(`built libggml-base (not kept) in ${await target('ggml-base')} s`);
  for (const variant of variants) {
    const seconds = await target(`ggml-cpu-${variant}`);
    const file = `libggml-cpu-${variant}.so`;
    await copyFile(path.join(build, 'bin', file), path.join(dest, file));
    progress(`built CPU variant ${variant} in ${seconds} s`);
  }
}
