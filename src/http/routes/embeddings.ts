import { Router } from 'express';
import { embeddingsRequestSchema, encodeBase64, type EmbeddingsResponse } from '../../api/embeddings.js';
import { parseRequest } from '../../api/validate.js';
import { embed, type EmbeddingModel } from '../../core/tasks/embed.js';
import { requestSignal, type ServerContext } from '../context.js';

/** POST /v1/embeddings (OpenAI). */
export function embeddingsRouter({ engine, shutdown }: ServerContext): Router {
  const router = Router();
  router.post('/v1/embeddings', async (req, res) => {
    const request = parseRequest(embeddingsRequestSchema, req.body);
    const signal = requestSignal(req, res, shutdown);
    const body = await engine.withModel<EmbeddingModel, EmbeddingsResponse>(request.model, ['embedding'], async (model, installed) => {
      const result = await embed(model, installed, { inputs: request.input, dimensions: request.dimensions, truncate: request.truncate }, signal);
      return {
        object: 'list',
        data: result.vectors.map((vector, index) => ({
          object: 'embedding',
          index,
          embedding: request.encoding_format === 'base64' ? encodeBase64(vector) : Array.from(vector),
        })),
        model: installed.id,
        usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
      };
    }, { keepAliveMs: request.keep_alive });
    res.json(body);
  });
  return router;
}
