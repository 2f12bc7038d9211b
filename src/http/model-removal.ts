import { isBundled } from '../core/catalog.js';
import type { Engine } from '../core/engine.js';
import { InvalidRequestError, LserveError, ModelNotFoundError, StoreError } from '../core/errors.js';
import type { RemoveOutcome } from '../core/store.js';

/**
 * Removing an installed model over HTTP (DELETE /v1/models/{id}, DELETE
 * /api/delete): unloaded first; a registered local file is only
 * unregistered; a bundled model cannot go; 409 while it answers a request or
 * a pull of it runs (on this server: `pulls`, or in another process: the
 * store's pull lock). Nothing installed is a 404, and a partial download of
 * it stays for the next pull to resume. `notInstalled` words the 404 for the
 * route's clients. Resolves to the id removed.
 */
export async function removeInstalledModel(engine: Engine, name: string, pulls: ReadonlySet<string>, notInstalled: () => LserveError): Promise<string> {
  const entry = engine.catalog.get(name);
  if (entry && isBundled(entry)) throw new InvalidRequestError(`'${entry.id}' is bundled with lserve and cannot be removed.`, { param: 'model', code: 'model_bundled' });
  const installed = await engine.store.resolve(name);
  const id = installed?.id ?? entry?.id ?? name;
  if (pulls.has(id)) throw conflict(`A pull of '${id}' is running on this server; cancel it (close its request) or wait for it to finish.`, 'pull_in_progress');
  if (!installed) throw notInstalled();
  const busy = engine.manager.loaded().find((m) => m.id === id)?.activeRequests ?? 0;
  if (busy > 0) throw conflict(`'${id}' is answering ${busy} request${busy === 1 ? '' : 's'}; remove it when ${busy === 1 ? 'it is' : 'they are'} done.`, 'model_busy');
  await engine.manager.unload(id);
  let removed: RemoveOutcome;
  try {
    removed = await engine.store.remove(id);
  } catch (error) {
    if (error instanceof StoreError && error.code === 'pull_in_progress') throw conflict(error.message.replace(/; stop it.*$/, '; wait for it to finish.'), 'pull_in_progress');
    throw error;
  }
  // Removed by someone else meanwhile (another process on the same store).
  if (removed !== 'installed') throw notInstalled();
  return id;
}

/** A 409 about the model. */
export function conflict(message: string, code: string): LserveError {
  return new LserveError(409, 'invalid_request_error', message, { code, param: 'model' });
}

/** The 404 of DELETE /v1/models/{id}. */
export function notInstalledError(name: string): ModelNotFoundError {
  return new ModelNotFoundError(`Model '${name}' is not installed. GET /v1/catalog lists the installed ones.`);
}
