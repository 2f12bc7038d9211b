import type { Request, RequestHandler, Response } from 'express';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Engine } from '../core/engine.js';
import type { EngineEvent } from '../core/events.js';

/**
 * The server's Prometheus metrics (`GET /metrics`, on with `serve --metrics`).
 * One registry per server, never prom-client's global one, so that several
 * servers (tests) can run in one process. What the work amounts to comes from
 * the engine's events (core/events.ts: tasks and runtimes report there and
 * know nothing of Prometheus); what is loaded, and how many wait for each
 * model, is read from the model manager at each scrape; HTTP requests are
 * counted by a middleware, labelled with the Express route pattern
 * (`/v1/models/:model`), never the raw path, so ids and file names in URLs
 * cannot multiply the series. Model labels are installed model ids, never
 * what a request typed.
 */

/** Label of a request that matched no route (404s, and requests refused before routing: Host/Origin, API key). */
export const UNMATCHED_ROUTE = 'unmatched';

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const TOKENS_PER_SECOND_BUCKETS = [1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000];

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly stopListening: () => void;
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly latency: Histogram<'method' | 'route'>;
  private readonly handlers: { [T in EngineEvent['type']]: (event: Extract<EngineEvent, { type: T }>) => void };

  /** `draining`: whether the server is draining (SIGTERM), for lserve_draining. */
  constructor(engine: Engine, draining: () => boolean = () => false) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({ name: 'lserve_http_requests_total', help: 'HTTP requests by route pattern and status.', labelNames: ['method', 'route', 'status'], registers });
    this.latency = new Histogram({
      name: 'lserve_http_request_duration_seconds',
      help: 'HTTP request latency, until the response (or stream) ended, by route pattern.',
      labelNames: ['method', 'route'],
      buckets: LATENCY_BUCKETS,
      registers,
    });

    new Gauge({
      name: 'lserve_draining',
      help: '1 while the server drains (SIGTERM: GET /ready answers 503, in-flight work finishes), else 0.',
      registers,
      collect() {
        this.set(draining() ? 1 : 0);
      },
    });

    const loaded = () => engine.manager.loaded();
    new Gauge({
      name: 'lserve_loaded_models',
      help: 'Models loaded now.',
      registers,
      collect() {
        this.set(loaded().length);
      },
    });
    new Gauge({
      name: 'lserve_model_memory_bytes',
      help: 'Memory a loaded model holds (its estimate while loading), by model.',
      labelNames: ['model', 'kind'],
      registers,
      collect() {
        this.reset();
        for (const m of loaded()) this.set({ model: m.id, kind: m.kind }, m.memoryBytes);
      },
    });
    new Gauge({
      name: 'lserve_model_active_requests',
      help: 'Requests holding a loaded model now (being served or waiting in its line), by model.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const m of loaded()) this.set({ model: m.id }, m.activeRequests);
      },
    });
    new Gauge({
      name: 'lserve_model_queue_depth',
      help: 'Requests waiting in a loaded model\'s line (a free chat sequence, a turn of its job queue: a transcription, an image, a piece of speech), by model.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const m of loaded()) this.set({ model: m.id }, m.queued);
      },
    });

    const perModel = (name: string, help: string) => new Counter({ name, help, labelNames: ['model'], registers });
    const rejected = perModel('lserve_model_rejected_requests_total', 'Requests refused with 503 because the model\'s line was full, by model.');
    const promptTokens = perModel('lserve_chat_prompt_tokens_total', 'Chat prompt tokens (tokens in), by model.');
    const completionTokens = perModel('lserve_chat_completion_tokens_total', 'Chat tokens generated (tokens out), by model.');
    const decodeRate = new Histogram({
      name: 'lserve_chat_decode_tokens_per_second',
      help: 'Decode speed of each chat generation (tokens after the first, over the time since the first), by model.',
      labelNames: ['model'],
      buckets: TOKENS_PER_SECOND_BUCKETS,
      registers,
    });
    const audioIn = perModel('lserve_transcription_audio_seconds_total', 'Seconds of audio transcribed (uploads and live streams), by model.');
    const audioOut = perModel('lserve_speech_audio_seconds_total', 'Seconds of audio synthesised, by model.');
    const images = perModel('lserve_images_generated_total', 'Images generated, by model.');
    const steps = perModel('lserve_image_denoising_steps_total', 'Denoising steps run for generated images, by model.');
    const pages = perModel('lserve_ocr_pages_total', 'Images read by OCR, by model.');
    const restarts = new Counter({
      name: 'lserve_child_process_restarts_total',
      help: 'Supervised child processes (sherpa-onnx) started again after they died, by process.',
      labelNames: ['process'],
      registers,
    });

    const sessions = new Gauge({ name: 'lserve_realtime_sessions', help: 'Realtime sessions open now, by type (realtime, transcription).', labelNames: ['type'], registers });
    const sessionsTotal = new Counter({ name: 'lserve_realtime_sessions_total', help: 'Realtime sessions opened, by type.', labelNames: ['type'], registers });
    const voiceLatency = new Histogram({
      name: 'lserve_realtime_voice_latency_seconds',
      help: "Voice to voice: from the end of the user's speech to the first audio of the answer, by chat model.",
      labelNames: ['model'],
      buckets: [0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10],
      registers,
    });

    this.handlers = {
      chat: (e) => {
        promptTokens.inc({ model: e.model }, e.promptTokens);
        completionTokens.inc({ model: e.model }, e.completionTokens);
        if (e.decodeTokensPerSecond !== null) decodeRate.observe({ model: e.model }, e.decodeTokensPerSecond);
      },
      transcription: (e) => audioIn.inc({ model: e.model }, e.audioSeconds),
      speech: (e) => audioOut.inc({ model: e.model }, e.audioSeconds),
      images: (e) => {
        images.inc({ model: e.model }, e.images);
        steps.inc({ model: e.model }, e.steps);
      },
      ocr: (e) => pages.inc({ model: e.model }, e.pages),
      rejected: (e) => rejected.inc({ model: e.model }),
      restart: (e) => restarts.inc({ process: e.process }),
      'realtime-session': (e) => {
        sessions.inc({ type: e.sessionType }, e.change);
        if (e.change > 0) sessionsTotal.inc({ type: e.sessionType });
      },
      'voice-latency': (e) => voiceLatency.observe({ model: e.model }, e.seconds),
    };
    this.stopListening = engine.events.on((event) => (this.handlers[event.type] as (e: EngineEvent) => void)(event));
  }

  /** Counts every request when its response ends (499: the client left first), by method, route pattern and status. */
  requestCounter(): RequestHandler {
    return (req, res, next) => {
      const start = process.hrtime.bigint();
      res.once('close', () => {
        const route = routeOf(req);
        const status = String(res.headersSent ? res.statusCode : 499);
        this.requests.inc({ method: req.method, route, status });
        this.latency.observe({ method: req.method, route }, Number(process.hrtime.bigint() - start) / 1e9);
      });
      next();
    };
  }

  /** GET /metrics: the exposition text. */
  async send(_req: Request, res: Response): Promise<void> {
    const text = await this.registry.metrics();
    res.setHeader('Content-Type', this.registry.contentType);
    res.setHeader('Cache-Control', 'no-store');
    res.end(text);
  }

  /** Stops listening to the engine (server shutdown). */
  close(): void {
    this.stopListening();
  }
}

/** The pattern of the route that handled a request (`/v1/models/:model`), or UNMATCHED_ROUTE. */
function routeOf(req: Request): string {
  const path = (req.route as { path?: unknown } | undefined)?.path;
  return typeof path === 'string' ? `${req.baseUrl ?? ''}${path}` : UNMATCHED_ROUTE;
}
