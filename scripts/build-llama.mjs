#!/usr/bin/env node
// Builds node-llama-cpp's bundled llama.cpp for this CPU with scripts/llama/threadpool.patch applied
// (one persistent ggml CPU threadpool per context, poll=50, as llama.cpp's own tools do).
// Usage: node scripts/build-llama.mjs [--check]      then lserve uses the build (see src/runtimes/llama/runtime.ts)
// --check: only say whether the patch applies, build nothing.
// Idempotent: an already-patched source is built as is; refuses if the patch does not apply.
// The addon source is restored to pristine afterwards (the built binary stays in localBuilds/).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const patchFile = join(here, 'llama', 'threadpool.patch');
const pkgDir = join(here, '..', 'node_modules', 'node-llama-cpp');
if (!existsSync(join(pkgDir, 'llama', 'addon', 'AddonContext.cpp'))) {
  console.error(`refusing: no node-llama-cpp addon source under ${pkgDir} (run npm ci first)`);
  process.exit(1);
}
const { version } = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));

function patch(...args) {
  return spawnSync('patch', ['-p1', '--force', '--fuzz=0', '--silent', '-d', pkgDir, '-i', patchFile, ...args], { encoding: 'utf8' });
}

const checkOnly = process.argv.includes('--check');
let applied = false;
if (patch('-R', '--dry-run').status === 0) {
  if (checkOnly) { console.log(`threadpool.patch is applied to node-llama-cpp ${version} (${pkgDir})`); process.exit(0); }
  console.log(`threadpool.patch already applied to node-llama-cpp ${version}`);
} else if (patch('-N', '--dry-run').status === 0) {
  if (checkOnly) { console.log(`threadpool.patch applies to node-llama-cpp ${version} (${pkgDir})`); process.exit(0); }
  const r = patch('-N');
  if (r.status !== 0) throw new Error(`patch failed:\n${r.stdout}${r.stderr}`);
  applied = true;
  console.log(`applied threadpool.patch to node-llama-cpp ${version}`);
} else {
  console.error(`refusing: scripts/llama/threadpool.patch does not apply to node-llama-cpp ${version} (${pkgDir}/llama/addon).\n` +
    `It was made for node-llama-cpp 3.21.1; regenerate it for this version.\n${patch('-N', '--dry-run').stdout}`);
  process.exit(1);
}

try {
  const command = existsSync(join(pkgDir, 'llama', 'llama.cpp')) ? 'build' : 'download'; // download: offline, clones the bundled source
  // GGML_OPENMP=OFF like the prebuilt binaries: the threadpool (and its polling) is only used without OpenMP.
  const env = { NODE_LLAMA_CPP_CMAKE_OPTION_GGML_OPENMP: 'OFF', ...process.env };
  // lserve uses this build by default while it stays node-llama-cpp's last build (src/runtimes/llama/runtime.ts).
  const marker = join(pkgDir, 'llama', 'lserve-threadpool-build.json');
  rmSync(marker, { force: true });
  execFileSync('nice', ['-n', '19', 'npx', '--no', 'node-llama-cpp', 'source', command, '--gpu', 'false', '--noUsageExample'], { stdio: 'inherit', env });
  const { folderName } = JSON.parse(readFileSync(join(pkgDir, 'llama', 'lastBuild.json'), 'utf8'));
  writeFileSync(marker, JSON.stringify({ folderName, nodeLlamaCpp: version, patch: 'threadpool.patch', builtAt: new Date().toISOString() }, null, 2) + '\n');
  console.log(`built ${folderName}: lserve uses it by default (LSERVE_LLAMA_BUILD=prebuilt for the prebuilt binary)`);
} finally {
  // leave node-llama-cpp's source pristine (also when the patch was found applied)
  const r = patch('-R');
  if (r.status !== 0) console.error(`could not restore node-llama-cpp's addon source:\n${r.stdout}${r.stderr}`);
  else console.log(`restored node-llama-cpp's addon source${applied ? '' : ' (it was found patched)'}`);
}
