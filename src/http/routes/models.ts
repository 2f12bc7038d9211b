import { Router } from 'express';
import { statSync } from 'node:fs';
import type { ModelList, ModelObject } from '../../api/models.js';
import { MODEL_KINDS, inputModalities } from '../../core/catalog.js';
import type { InstalledModel } from '../../core/store.js';
import type { ServerContext } from '../context.js';

function createdAt(model: InstalledModel): number {
  if (model.installedAt) return Math.floor(Date.parse(model.installedAt) / 1000);
  const first = Object.values(model.files)[0];
  try {
    return first ? Math.floor(statSync(first).mtimeMs / 1000) : 0;
  } catch {
    return 0;
  }
}

export function modelsRouter({ engine }: ServerContext): Router {
  const router = Router();
  const toObject = (model: InstalledModel, loaded: Set<string>): ModelObject => {
    const input = inputModalities(model.entry);
    return {
      id: model.id,
      object: 'model',
      created: createdAt(model),
      owned_by: model.entry.owned_by,
      status: 'running',
      kind: model.entry.kind,
      loaded: loaded.has(model.id),
      ...(input ? { architecture: { input_modalities: input, output_modalities: ['text'] } } : {}),
    };
  };

  router.get('/v1/models', async (_req, res) => {
    const loaded = new Set(engine.manager.loaded().map((m) => m.id));
    const body: ModelList = { object: 'list', data: (await engine.store.list()).map((m) => toObject(m, loaded)) };
    res.json(body);
  });

  router.get('/v1/models/:model', async (req, res) => {
    const model = await engine.resolve(req.params.model, MODEL_KINDS);
    res.json(toObject(model, new Set(engine.manager.loaded().map((m) => m.id))));
  });

  return router;
}
