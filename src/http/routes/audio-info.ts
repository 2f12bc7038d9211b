import { Router } from 'express';
import { InvalidRequestError } from '../../core/errors.js';
import { audioInfo } from '../../core/tasks/audio-info.js';
import type { ServerContext } from '../context.js';

/** GET /v1/audio/info?model=<id>: languages (and speakers) an audio model supports. */
export function audioInfoRouter({ engine }: ServerContext): Router {
  const router = Router();
  router.get('/v1/audio/info', async (req, res) => {
    const model = req.query.model;
    if (typeof model !== 'string' || model === '') throw new InvalidRequestError("Query parameter 'model' is required: an audio model id.", { param: 'model', code: 'missing_required_parameter' });
    res.json(await audioInfo(engine, model));
  });
  return router;
}
