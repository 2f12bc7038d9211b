import { Router } from 'express';
import { pullRequestSchema, type CatalogList, type CatalogModel, type ModelDeleted, type PullStreamEvent } from '../../api/models.js';
import { parseKnownFields } from '../../api/validate.js';
import { isBundled, type CatalogEntry } from '../../core/catalog.js';
import { pullModel, type PullEvent } from '../../core/download.js';
import { listingRow, listModels, type ModelListing } from '../../core/listing.js';
import { InvalidRequestError, ModelNotFoundError, StoreError } from '../../core/errors.js';
import { localFileNames } from '../../core/store.js';
import { requestSignal, type ServerContext } from '../context.js';
import { openAIError, toLserveError } from '../errors.js';
import { SseWriter } from '../sse.js';
import { notInstalledError, removeInstalledModel } from '../model-removal.js';

/**
 * The model store over HTTP, for clients that manage models (the playground's
 * Models panel does):
 *
 * - GET /v1/catalog: every model the server knows, installed or not, with
 *   size and status (what `lserve list --all --json` shows).
 * - POST /v1/models/pull `{model}`: pulls a catalog model, answering an SSE
 *   stream of progress events (PullStreamEvent: bytes per file and for the
 *   whole model), then `done` or `error`. The same pull as `lserve pull`
 *   (resume, sha256, one pull per model across processes). A client that
 *   disconnects stops the pull; its partial files stay and the next pull
 *   resumes them. `stream: false` answers one JSON object when it is over.
 *   Only catalog models: your own files and URLs are registered with the
 *   CLI, never by a remote client.
 * - DELETE /v1/models/{id}: removes an installed model (a registered local
 *   file is only unregistered), unloading it first; 409 while it answers a
 *   request or a pull of it runs.
 *
 * Like every /v1 route these are behind the Host/Origin checks and the API key.
 */

/** Progress events per file go out at most this often (the download core reports every chunk). */
const PROGRESS_INTERVAL_MS = 150;

export function modelStoreRouter(ctx: ServerContext): Router {
  const { engine } = ctx;
  const router = Router();
  /** Models this server is pulling now (POST /api/pull's too). */
  const pulling = ctx.pulls;

  router.get('/v1/catalog', async (_req, res) => {
    const loaded = new Set(engine.manager.loaded().map((m) => m.id));
    const data = (await listModels(engine.store, true)).map((listing) => catalogModel(listing, loaded.has(listing.id), pulling.has(listing.id)));
    const body: CatalogList = { object: 'list', data };
    res.json(body);
  });

  router.post('/v1/models/pull', async (req, res) => {
    const body = parseKnownFields(pullRequestSchema, req.body);
    const entry = engine.catalog.get(body.model);
    if (!entry) {
      if (/^(https?:|file:)|[\\/]/i.test(body.model)) {
        throw new InvalidRequestError('Only catalog models can be pulled over HTTP; register your own files, folders and URLs with `lserve pull` on the server.', {
          param: 'model',
          code: 'unsupported_parameter',
        });
      }
      const close = engine.catalog.suggest(body.model);
      throw new ModelNotFoundError(`Unknown model '${body.model}'.${close.length ? ` Did you mean ${close.map((c) => `'${c}'`).join(', ')}?` : ''} GET /v1/catalog lists the catalog.`);
    }
    if (isBundled(entry)) throw new InvalidRequestError(`'${entry.id}' is bundled with lserve: it is ready to use, there is nothing to pull.`, { param: 'model', code: 'model_bundled' });
    const signal = requestSignal(req, res, ctx.shutdown);
    const id = entry.id;

    if (body.stream === false) {
      pulling.add(id);
      try {
        const result = await pullModel(engine.store, id, { signal, hfToken: ctx.options.hfToken });
        const model = await engine.prepare(result.model);
        res.json({ id, object: 'model', kind: model.entry.kind, size_bytes: model.sizeBytes, already_installed: result.alreadyInstalled, downloaded_bytes: result.downloadedBytes });
      } catch (error) {
        if (signal.aborted) return;
        throw error;
      } finally {
        pulling.delete(id);
      }
      return;
    }

    const sse = new SseWriter(res);
    const send = (event: PullStreamEvent) => sse.event(event.type, event);
    const progress = pullProgress(entry, send);
    pulling.add(id);
    try {
      send(progress.start);
      const result = await pullModel(engine.store, id, { signal, onProgress: progress.onEvent, hfToken: ctx.options.hfToken });
      const model = await engine.prepare(result.model, (line) => send({ type: 'prepare', model: id, message: line }));
      send({ type: 'done', model: id, kind: model.entry.kind, size_bytes: model.sizeBytes, already_installed: result.alreadyInstalled, downloaded_bytes: result.downloadedBytes });
    } catch (error) {
      if (!signal.aborted) {
        const failure = toLserveError(error);
        if (failure.status >= 500 && !(failure instanceof StoreError)) ctx.options.log(`pull of ${id} failed: ${(failure.cause as Error)?.stack ?? failure.stack}`);
        send({ type: 'error', model: id, error: openAIError(failure).error });
      }
    } finally {
      pulling.delete(id);
      sse.end();
    }
  });

  router.delete('/v1/models/:model', async (req, res) => {
    const name = req.params.model;
    const id = await removeInstalledModel(engine, name, pulling, () => notInstalledError(name));
    const body: ModelDeleted = { id, object: 'model', deleted: true };
    res.json(body);
  });

  return router;
}

/** PullEvents of the download core as the stream's events: snake_case, model-wide byte counts, progress throttled per file. */
function pullProgress(entry: CatalogEntry, send: (event: PullStreamEvent) => void): { start: PullStreamEvent; onEvent: (event: PullEvent) => void } {
  const id = entry.id;
  const names = localFileNames(entry);
  /** Each file's size (catalog, else what its download announced) and bytes done. */
  const files = new Map(Object.entries(entry.files).map(([role, spec]) => [names[role]!, { role, total: spec.size ?? null, done: 0 }]));
  const lastSent = new Map<string, number>();
  const completed = () => [...files.values()].reduce((sum, f) => sum + f.done, 0);
  const modelTotal = () => ([...files.values()].every((f) => f.total !== null) ? [...files.values()].reduce((sum, f) => sum + f.total!, 0) : null);
  const start: PullStreamEvent = {
    type: 'start',
    model: id,
    files: [...files.entries()].map(([file, f]) => ({ file, role: f.role, size_bytes: f.total })),
    total_bytes: modelTotal(),
  };
  const onEvent = (event: PullEvent) => {
    const file = event.type === 'waiting' ? undefined : files.get(event.file);
    switch (event.type) {
      case 'waiting':
        send({ type: 'waiting', model: id, pid: event.pid });
        return;
      case 'file-start':
        if (file) {
          file.total = event.totalBytes ?? file.total;
          file.done = event.resumedFrom;
        }
        send({ type: 'file_start', model: id, file: event.file, role: event.role, total_bytes: event.totalBytes ?? null, resumed_from: event.resumedFrom });
        return;
      case 'progress': {
        if (file) file.done = event.receivedBytes;
        const now = Date.now();
        const total = event.totalBytes ?? file?.total ?? null;
        if (now - (lastSent.get(event.file) ?? 0) < PROGRESS_INTERVAL_MS && event.receivedBytes !== total) return;
        lastSent.set(event.file, now);
        send({
          type: 'progress',
          model: id,
          file: event.file,
          role: event.role,
          received_bytes: event.receivedBytes,
          total_bytes: total,
          completed_bytes: completed(),
          model_total_bytes: modelTotal(),
        });
        return;
      }
      case 'retry':
        send({ type: 'retry', model: id, file: event.file, role: event.role, attempt: event.attempt, message: event.message });
        return;
      case 'file-done':
        if (file) {
          file.total = event.sizeBytes;
          file.done = event.sizeBytes;
        }
        send({ type: 'file_done', model: id, file: event.file, role: event.role, size_bytes: event.sizeBytes, sha256: event.sha256, verified_with: event.verifiedWith, reused: event.reused });
        return;
    }
  };
  return { start, onEvent };
}

function catalogModel(listing: ModelListing, loaded: boolean, pulling: boolean): CatalogModel {
  const row = listingRow(listing);
  return { ...row, object: 'catalog.model', status: !listing.installed && pulling ? 'pulling' : row.status, loaded };
}
