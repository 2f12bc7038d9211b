import { z } from 'zod';
import type { ModelKind } from '../../core/catalog.js';
import type { Engine } from '../../core/engine.js';

/** The `model` argument every task tool takes: an installed model's id or alias; absent, the default of the tool's kind. */
export function modelField(kind: string): z.ZodOptional<z.ZodString> {
  return z.string().min(1).max(200).optional().describe(`Installed ${kind} model id or alias; default: the default ${kind} model (see list_models).`);
}

/**
 * The model a call runs on: the one it names, else its kind's default, as
 * every request that names none is served (core/model-choice.ts). None
 * installed is a ModelNotFoundError whose message names the `lserve pull` to
 * run; the tool answers it as a tool error.
 */
export async function modelFor(engine: Engine, kind: ModelKind, named: string | undefined): Promise<string> {
  return named ?? (await engine.defaultModel(kind));
}
