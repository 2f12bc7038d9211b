import type { ModelKind } from '../core/catalog.js';
import type { Engine } from '../core/engine.js';
import { ModelNotFoundError, NotFoundError } from '../core/errors.js';
import type { InstalledModel } from '../core/store.js';
import { lserveCandidates, ollamaNotFound } from '../api/ollama/names.js';

/**
 * The installed model an Ollama name stands for (api/ollama/names.ts), of
 * one of `kinds`. A name that is nowhere is Ollama's 404; a model of another
 * kind is lserve's 400 that says which kind it is.
 */
export async function resolveOllamaModel(engine: Engine, name: string, kinds: readonly ModelKind[]): Promise<InstalledModel> {
  for (const candidate of lserveCandidates(name)) {
    try {
      return await engine.resolve(candidate, kinds);
    } catch (error) {
      if (!(error instanceof ModelNotFoundError)) throw error;
    }
  }
  throw new NotFoundError(ollamaNotFound(name), { code: 'model_not_found', param: 'model' });
}
