import { Router } from 'express';
import { ollamaEmbeddingsSchema, ollamaEmbedSchema, type OllamaEmbeddingsResponse, type OllamaEmbedResponse } from '../../api/ollama/embed.js';
import { parseRequest } from '../../api/validate.js';
import { embed, type EmbeddingModel } from '../../core/tasks/embed.js';
import { requestSignal, type ServerContext } from '../context.js';
import { resolveOllamaModel } from '../ollama-model.js';

/** POST /api/embed and the older POST /api/embeddings (Ollama), on the embedding task /v1/embeddings uses. */
export function ollamaEmbedRouter({ engine, shutdown }: ServerContext): Router {
  const router = Router();
  const ns = (ms: number) => Math.max(0, Math.round(ms * 1e6));

  router.post('/api/embed', async (req, res) => {
    const started = performance.now();
    const body = parseRequest(ollamaEmbedSchema, req.body);
    const installed = await resolveOllamaModel(engine, body.model, ['embedding']);
    const inputs = typeof body.input === 'string' ? [body.input] : body.input;
    const signal = requestSignal(req, res, shutdown);
    let held = started;
    const result = await engine.withModel<EmbeddingModel, Awaited<ReturnType<typeof embed>>>(
      installed.id,
      ['embedding'],
      (model, loaded) => {
        held = performance.now();
        return inputs.length ? embed(model, loaded, { inputs, dimensions: body.dimensions, truncate: body.truncate }, signal) : Promise.resolve({ vectors: [], promptTokens: 0 });
      },
      { keepAliveMs: body.keep_alive },
    );
    const answer: OllamaEmbedResponse = {
      model: body.model,
      embeddings: result.vectors.map((v) => Array.from(v)),
      total_duration: ns(performance.now() - started),
      load_duration: ns(held - started),
      prompt_eval_count: result.promptTokens,
    };
    res.json(answer);
  });

  router.post('/api/embeddings', async (req, res) => {
    const body = parseRequest(ollamaEmbeddingsSchema, req.body);
    const installed = await resolveOllamaModel(engine, body.model, ['embedding']);
    const signal = requestSignal(req, res, shutdown);
    const vector = await engine.withModel<EmbeddingModel, Float32Array | undefined>(
      installed.id,
      ['embedding'],
      async (model, loaded) => (body.prompt === '' ? undefined : (await embed(model, loaded, { inputs: [body.prompt], truncate: true }, signal)).vectors[0]),
      { keepAliveMs: body.keep_alive },
    );
    const answer: OllamaEmbeddingsResponse = { embedding: vector ? Array.from(vector) : [] };
    res.json(answer);
  });

  return router;
}
