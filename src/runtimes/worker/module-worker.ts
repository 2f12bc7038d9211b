import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';

/**
 * Starts a worker thread on a module of this package given as its compiled
 * `.js` URL: that file when it exists (dist/), otherwise — under the
 * TypeScript sources (tests, tsx) — the `.ts` beside it through tsx's loader,
 * since Node cannot start a .ts worker by itself.
 */
export function startModuleWorker(compiled: URL): Worker {
  if (existsSync(fileURLToPath(compiled))) return new Worker(compiled);
  const source = new URL(compiled.href.replace(/\.js$/, '.ts')).href;
  const tsx = pathToFileURL(path.join(path.dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/esm/api/index.mjs')).href;
  return new Worker(`import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(source)}); })`, { eval: true });
}
