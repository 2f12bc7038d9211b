import { Router, type Request, type Response } from 'express';
import { createdAt, modelObject, type AnthropicModelInfo, type AnthropicModelPage, type ModelList } from '../../api/models.js';
import { MODEL_KINDS } from '../../core/catalog.js';
import type { InstalledModel } from '../../core/store.js';
import type { LoadedInfo } from '../../core/manager.js';
import type { ServerContext } from '../context.js';

/** Whether the client speaks Anthropic's API (its SDKs send anthropic-version on every request). */
const wantsAnthropic = (req: Request) => req.path.startsWith('/v1/anthropic/') || req.get('anthropic-version') !== undefined;

export function modelsRouter({ engine }: ServerContext): Router {
  const router = Router();
  const loadedNow = () => new Map(engine.manager.loaded().map((m) => [m.id, m]));
  const defaultIds = async () => new Set(Object.values(await engine.defaults()).map((pick) => pick.id));
  const toAnthropic = (model: InstalledModel, loaded: Map<string, LoadedInfo>): AnthropicModelInfo => ({
    type: 'model',
    id: model.id,
    display_name: model.entry.description || model.id,
    created_at: new Date(createdAt(model) * 1000).toISOString(),
    max_input_tokens: loaded.get(model.id)?.contextSize ?? null,
    max_tokens: loaded.get(model.id)?.contextSize ?? null,
    lifecycle: 'active',
    line: null,
    deprecated_at: null,
    retires_at: null,
    capabilities: null,
  });

  const list = async (req: Request, res: Response) => {
    const models = await engine.store.list();
    if (wantsAnthropic(req)) {
      const data = models.filter((m) => m.entry.kind === 'chat').map((m) => toAnthropic(m, loadedNow()));
      const page: AnthropicModelPage = { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
      res.json(page);
      return;
    }
    const defaults = await defaultIds();
    const body: ModelList = { object: 'list', data: models.map((m) => modelObject(m, loadedNow(), defaults)), aliases: await engine.aliases() };
    res.json(body);
  };
  const one = async (req: Request, res: Response) => {
    const model = await engine.resolve(String(req.params.model), wantsAnthropic(req) ? ['chat'] : MODEL_KINDS);
    res.json(wantsAnthropic(req) ? toAnthropic(model, loadedNow()) : modelObject(model, loadedNow(), await defaultIds()));
  };
  // One route per path, so that metrics label each by its own pattern.
  for (const base of ['/v1/models', '/v1/anthropic/v1/models']) {
    router.get(base, list);
    router.get(`${base}/:model`, one);
  }

  return router;
}
