import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export type WithLock = <T>(scope: [object, string], callback: () => Promise<T>) => Promise<T>;

let loaded: Promise<WithLock> | undefined;

/**
 * node-llama-cpp's own lock (lifecycle-utils' withLock: on [context,
 * 'context'] around a context's decodes, on [sequence._lock, 'evaluate']
 * around a sequence's evaluations), taken from the copy node-llama-cpp
 * itself resolves: locks live in that module's state, so another copy would
 * not exclude its work.
 */
export function nodeLlamaLock(): Promise<WithLock> {
  loaded ??= (async () => {
    const file = createRequire(import.meta.resolve('node-llama-cpp')).resolve('lifecycle-utils');
    return ((await import(pathToFileURL(file).href)) as { withLock: WithLock }).withLock;
  })();
  return loaded;
}
