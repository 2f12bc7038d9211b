import { Router } from 'express';
import { documentText, rerankRequestSchema, type RerankResponse } from '../../api/rerank.js';
import { parseRequest } from '../../api/validate.js';
import { rerank, type RankingModel } from '../../core/tasks/rerank.js';
import { requestSignal, type ServerContext } from '../context.js';

/** POST /v1/rerank (response shape: DESIGN.md §3). */
export function rerankRouter({ engine, shutdown }: ServerContext): Router {
  const router = Router();
  router.post('/v1/rerank', async (req, res) => {
    const request = parseRequest(rerankRequestSchema, req.body);
    const texts = request.documents.map(documentText);
    const signal = requestSignal(req, res, shutdown);
    const body = await engine.withModel<RankingModel, RerankResponse>(request.model, ['rerank'], async (model, installed) => {
      const result = await rerank(model, installed, { query: request.query, documents: texts, topN: request.top_n, truncate: request.truncate }, signal);
      return {
        object: 'list',
        model: installed.id,
        results: result.results.map(({ index, score }) => ({
          index,
          relevance_score: score,
          ...(request.return_documents ? { document: { text: texts[index]! } } : {}),
        })),
        usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
      };
    }, { keepAliveMs: request.keep_alive });
    res.json(body);
  });
  return router;
}
