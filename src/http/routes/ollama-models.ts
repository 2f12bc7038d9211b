import { createRequire } from 'node:module';
import express, { Router, type RequestHandler } from 'express';
import { ollamaModelfile, ollamaModelInfo, ollamaParameters } from '../../api/ollama/model-info.js';
import {
  copyRequestSchema,
  deleteRequestSchema,
  OLLAMA_API_VERSION,
  pushRequestSchema,
  requestedModel,
  showRequestSchema,
  type OllamaListResponse,
  type OllamaProcessResponse,
  type OllamaShowResponse,
} from '../../api/ollama/models.js';
import { lserveCandidates, ollamaName, ollamaNotFound } from '../../api/ollama/names.js';
import { assertJsonDepth, parseRequest } from '../../api/validate.js';
import { MODEL_KINDS } from '../../core/catalog.js';
import { InvalidRequestError, NotFoundError } from '../../core/errors.js';
import { ggufMetadata } from '../../core/gguf-facts.js';
import { copyId, copyModel } from '../../core/model-copy.js';
import type { ServerContext } from '../context.js';
import { removeInstalledModel } from '../model-removal.js';
import { configuredContextSize, describeModel, ggufFileOf, listRow } from '../ollama-describe.js';
import { resolveOllamaModel } from '../ollama-model.js';
import { ollamaPull } from '../ollama-pull.js';

/**
 * The model-management half of Ollama's API, so Ollama's clients
 * (`OLLAMA_HOST=http://127.0.0.1:8080`) list, inspect, pull, copy and delete
 * lserve's models (docs/ollama.md):
 *
 * - GET /api/tags: every installed model, named `<id>:latest`.
 * - POST /api/show: details, `model_info` (the GGUF's header), capabilities,
 *   template, parameters.
 * - GET /api/ps: the loaded models.
 * - POST /api/pull: a catalog model, with Ollama's progress lines (ollama-pull.ts).
 * - DELETE /api/delete, POST /api/copy: as DELETE /v1/models/{id} removes a
 *   model; a copy is a model of its own under the new name (core/model-copy.ts).
 * - GET /api/version.
 * - POST /api/create, /api/push: 501, lserve builds and pushes no Modelfiles.
 *
 * Behind the Host/Origin checks and the API key, as every route. Ollama's
 * clients and its documented `curl -d` examples send JSON with any content
 * type (curl's is form-urlencoded), so these routes read any body as JSON; a
 * browser cannot send one cross-site without an Origin, which is refused
 * before this.
 */

const { version: LSERVE_VERSION } = createRequire(import.meta.url)('../../../package.json') as { version: string };

const CREATE_REFUSED =
  'lserve does not build models from Modelfiles: register a model file, folder or URL with `npx lserve pull <file or repo> --kind chat` on the server, or pull a catalog model with POST /api/pull.';
const PUSH_REFUSED = 'lserve does not push models to a registry: it serves the models it has; pull catalog models with POST /api/pull, or register your own with `npx lserve pull <file or repo> --kind chat` on the server.';

export function ollamaModelsRouter(ctx: ServerContext): Router {
  const { engine } = ctx;
  const router = Router();
  const parseJson = express.json({ limit: ctx.options.maxBodyBytes, type: () => true });
  const anyJson: RequestHandler = (req, res, next) =>
    parseJson(req, res, (error?: unknown) => {
      if (error) return next(error);
      try {
        assertJsonDepth(req.body);
        next();
      } catch (tooDeep) {
        next(tooDeep);
      }
    });

  router.get('/api/version', (_req, res) => {
    res.json({ version: OLLAMA_API_VERSION, lserve: LSERVE_VERSION });
  });

  router.get('/api/tags', async (_req, res) => {
    const models = await Promise.all((await engine.store.list()).map(describeModel));
    const body: OllamaListResponse = { models: models.map(listRow) };
    res.json(body);
  });

  router.post('/api/show', anyJson, async (req, res) => {
    const body = parseRequest(showRequestSchema, req.body);
    const installed = await resolveOllamaModel(engine, requestedModel(body), MODEL_KINDS);
    const model = await describeModel(installed);
    const verbose = body.verbose === true;
    const file = ggufFileOf(installed);
    const metadata = file === undefined ? undefined : await ggufMetadata(file, { full: verbose });
    const projector = installed.files.mmproj === undefined ? undefined : await ggufMetadata(installed.files.mmproj, { full: verbose });
    const template = model.facts?.chatTemplate ?? '';
    const contextSize = configuredContextSize(engine, installed);
    const license = model.facts?.license ?? (installed.entry.license !== 'unknown' ? installed.entry.license : undefined);
    const answer: OllamaShowResponse = {
      ...(license ? { license } : {}),
      modelfile: ollamaModelfile(model.name, template, contextSize),
      parameters: ollamaParameters(contextSize),
      template,
      details: model.details,
      model_info: ollamaModelInfo(installed, model.facts, metadata, verbose),
      ...(projector ? { projector_info: ollamaModelInfo(installed, undefined, projector, verbose) } : {}),
      capabilities: model.capabilities,
      modified_at: model.modifiedAt,
    };
    res.json(answer);
  });

  router.get('/api/ps', async (_req, res) => {
    const loaded = engine.manager.loaded().sort((a, b) => a.id.localeCompare(b.id));
    const models: OllamaProcessResponse['models'] = [];
    for (const m of loaded) {
      const installed = await engine.store.resolve(m.id);
      if (!installed) continue;
      const model = await describeModel(installed);
      models.push({
        name: model.name,
        model: model.name,
        size: m.memoryBytes,
        digest: model.digest,
        details: model.details,
        // Null: in use now, or kept loaded for good (keep-alive -1): Ollama's clients read a time, so a far one.
        expires_at: new Date(m.expiresAt ?? FOREVER).toISOString(),
        size_vram: 0,
        ...(m.contextSize ? { context_length: m.contextSize } : {}),
      });
    }
    const body: OllamaProcessResponse = { models };
    res.json(body);
  });

  router.post('/api/pull', anyJson, ollamaPull(ctx));

  router.delete('/api/delete', anyJson, async (req, res) => {
    const name = requestedModel(parseRequest(deleteRequestSchema, req.body));
    // The store's names only (ids, catalog aliases): a name that stands for a default (whisper-1) deletes nothing.
    const candidates = lserveCandidates(name);
    let target = name;
    for (const candidate of candidates) {
      if ((await engine.store.resolve(candidate)) || engine.catalog.get(candidate)) {
        target = candidate;
        break;
      }
    }
    await removeInstalledModel(engine, target, ctx.pulls, () => new NotFoundError(`model "${name}" not found`, { code: 'model_not_found', param: 'model' }));
    res.status(200).end();
  });

  router.post('/api/copy', anyJson, async (req, res) => {
    const { source, destination } = parseRequest(copyRequestSchema, req.body);
    const installed = await resolveOllamaModel(engine, source, MODEL_KINDS).catch((error: unknown) => {
      throw error instanceof NotFoundError ? new NotFoundError(ollamaNotFound(source), { code: 'model_not_found', param: 'source' }) : error;
    });
    const id = copyId(destination);
    for (const candidate of new Set([id, ...lserveCandidates(destination)])) {
      const taken = (await engine.store.resolve(candidate).catch(() => undefined))?.id ?? engine.catalog.get(candidate)?.id;
      if (taken === undefined || taken === installed.id) continue;
      throw new InvalidRequestError(`destination "${destination}" is taken: it names the model ${ollamaName(taken)}; delete it first or choose another name.`, { param: 'destination', code: 'model_exists' });
    }
    if ((await engine.store.resolve(id).catch(() => undefined))?.id !== installed.id) await copyModel(engine.store, installed, id);
    res.status(200).end();
  });

  router.post('/api/create', (_req, res) => {
    res.status(501).json({ error: CREATE_REFUSED });
  });

  router.post('/api/push', anyJson, (req, res) => {
    requestedModel(parseRequest(pushRequestSchema, req.body));
    res.status(501).json({ error: PUSH_REFUSED });
  });

  return router;
}

/** The time a model kept loaded for good "expires": far enough that no client counts down to it. */
const FOREVER = Date.UTC(9999, 11, 31);
