import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * Starting a module of this package in a child process or a worker thread,
 * the one place that knows where the package runs from. A caller names the
 * module by its compiled `.js` URL (`new URL('./x-child.js', import.meta.url)`):
 *
 * - from dist/ (how users run lserve) that file exists and is what runs;
 * - from the TypeScript sources (the tests, `tsx`), there is no compiled
 *   file: the `.ts` beside it runs through tsx's loader, which is slower to
 *   start (it compiles on the way), so only tests and development pay it.
 *
 * Child processes take the loader with `--import`. A worker thread cannot on
 * Node 20 (hooks given to a worker by `--import` do not reach its own
 * imports), so it starts on tsx-worker.mjs, which registers tsx's ESM API in
 * the thread and then imports the `.ts` module.
 */

/** The `.ts` source of a compiled module's URL, when the compiled file is not there; undefined from dist/. */
function sourceOf(compiled: URL): URL | undefined {
  if (existsSync(fileURLToPath(compiled))) return undefined;
  return new URL(compiled.href.replace(/\.js$/, '.ts'));
}

/**
 * Node's arguments to run a module of this package as a child process's
 * entry: `nodeOptions` (`--expose-gc`…), the module, then `args` (what `ps`
 * shows after it: a runner's model id).
 */
export function moduleArgv(compiled: URL, args: readonly string[] = [], nodeOptions: readonly string[] = []): string[] {
  const source = sourceOf(compiled);
  if (!source) return [...nodeOptions, fileURLToPath(compiled), ...args];
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  return [...nodeOptions, '--import', tsx, fileURLToPath(source), ...args];
}

/** A worker thread on a module of this package (`options` as Node's Worker takes them: workerData, resourceLimits…). */
export function startModuleWorker(compiled: URL, options: WorkerOptions = {}): Worker {
  const source = sourceOf(compiled);
  if (!source) return new Worker(compiled, options);
  // tsx-worker.mjs imports the last argument.
  return new Worker(new URL('./tsx-worker.mjs', import.meta.url), { ...options, argv: [...(options.argv ?? []), source.href] });
}
