import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import WebSocket from 'ws';
import { SPEECH_FORMATS } from '../../src/audio/encode/types.js';
import { renderOneLine } from '../../test/fixtures/ocr/corpus.js';

/**
 * The requests bench/load.ts sends: one `Op` per route and model, each a
 * complete client exchange that ends in one outcome string:
 *
 * - an HTTP status (`200`, `503`, …) once the whole body was read (and, for a
 *   200, checked: JSON parses, an SSE stream reached its end marker);
 * - `cut` when the client hung up on purpose (streamed ops, when asked to:
 *   after the first chunk, or a random 20–500 ms after sending);
 * - `ws:<close code>` for a WebSocket stream that ran to its close (`ws:1000`
 *   is the normal end);
 * - `error:<kind>` for a network failure (`error:timeout`, `error:UND_ERR_SOCKET`
 *   for a connection the server dropped, `error:incomplete` for a 200 whose
 *   body was cut short or malformed, …).
 */

export interface OpContext {
  /** http://127.0.0.1:<port> */
  base: string;
  rng: () => number;
  /** Hang up part-way (streamed ops only). */
  cut: boolean;
  timeoutMs: number;
  /** Sent with every HTTP request and WebSocket upgrade of the op (bench/replicas.ts tags each op so the balancer's log names its replica). */
  headers?: Record<string, string>;
}

export interface Result {
  outcome: string;
  /** Response body or error message, shortened, for anything but a success or a cut. */
  detail?: string;
  /** What was sent, in a few words (kept with errors for the report). */
  request?: string;
}

export interface Op {
  /** Short route key used in the tables, e.g. `chat.stream`. */
  route: string;
  model?: string;
  /** Streamed response or WebSocket: may be cut. */
  streamed: boolean;
  run(ctx: OpContext): Promise<Result>;
}

export interface Inputs {
  /** 64×64 RGB PNG (img2img). */
  picture: Buffer;
  /** 64×64 RGBA PNG with a transparent square (edits: its own mask). */
  holed: Buffer;
  /** One rendered line of text (OCR). */
  ocrPng: Buffer;
  /** test/fixtures/audio/speech.wav as it is (upload, voice clone reference). */
  wav: Buffer;
  /** Its samples as raw PCM16 LE 16 kHz mono (WebSocket stream). */
  pcm: Buffer;
}

const SPEECH_WAV = fileURLToPath(new URL('../../test/fixtures/audio/speech.wav', import.meta.url));

/** The `data` chunk of a PCM16 mono 16 kHz WAV (refuses anything else). */
function pcm16Of(wav: Buffer): Buffer {
  if (wav.toString('ascii', 0, 4) !== 'RIFF' || wav.toString('ascii', 8, 12) !== 'WAVE') throw new Error('speech.wav is not a RIFF/WAVE file');
  let offset = 12;
  let format: { channels: number; rate: number; bits: number } | undefined;
  while (offset + 8 <= wav.length) {
    const id = wav.toString('ascii', offset, offset + 4);
    const size = wav.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (id === 'fmt ') format = { channels: wav.readUInt16LE(body + 2), rate: wav.readUInt32LE(body + 4), bits: wav.readUInt16LE(body + 14) };
    if (id === 'data') {
      if (!format || format.channels !== 1 || format.rate !== 16_000 || format.bits !== 16) throw new Error(`speech.wav must be 16 kHz mono PCM16, is ${JSON.stringify(format)}`);
      return wav.subarray(body, Math.min(wav.length, body + size));
    }
    offset = body + size + (size & 1);
  }
  throw new Error('speech.wav has no data chunk');
}

export async function loadInputs(): Promise<Inputs> {
  const size = 64;
  const rgb = Buffer.alloc(size * size * 3);
  for (let y = 0; y < size; y++) for (let x = 0; x < size; x++) rgb.set([x * 4, y * 4, ((x + y) * 2) & 255], (y * size + x) * 3);
  const picture = await sharp(rgb, { raw: { width: size, height: size, channels: 3 } }).png().toBuffer();
  const rgba = Buffer.alloc(size * size * 4);
  for (let i = 0; i < size * size; i++) {
    const x = i % size;
    const y = Math.floor(i / size);
    rgba.set([rgb[i * 3]!, rgb[i * 3 + 1]!, rgb[i * 3 + 2]!, x >= 16 && x < 48 && y >= 16 && y < 48 ? 0 : 255], i * 4);
  }
  const holed = await sharp(rgba, { raw: { width: size, height: size, channels: 4 } }).png().toBuffer();
  const wav = await readFile(SPEECH_WAV);
  return { picture, holed, ocrPng: (await renderOneLine()).png, wav, pcm: pcm16Of(wav) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pick = <T>(rng: () => number, items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
const int = (rng: () => number, lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1));
const short = (text: string, n = 300) => (text.length > n ? `${text.slice(0, n)}…` : text);

/** `error:<code>` from whatever fetch or ws threw: undici puts the socket error in `cause`. */
export function errorKind(error: unknown): string {
  const e = error as { name?: string; code?: string; cause?: { code?: string; name?: string } };
  return `error:${e?.cause?.code ?? e?.code ?? e?.cause?.name ?? e?.name ?? 'unknown'}`;
}

function errorText(error: unknown): string {
  const e = error as { message?: string; cause?: { message?: string } };
  return short(`${e?.message ?? String(error)}${e?.cause?.message ? ` (${e.cause.message})` : ''}`);
}

interface HttpOptions {
  /** A 200's body must pass this (whole body read). */
  check?: (body: Buffer) => boolean;
  /** What to record for a 200 that is not the final answer: run this next (e.g. fetch the stream_url). */
  then?: (body: Buffer) => Promise<Result>;
  request?: string;
}

/**
 * One HTTP exchange with a per-request timeout covering the body too. With
 * `ctx.cut` the client hangs up by aborting the fetch (which destroys the
 * connection, as a client going away does), in one of two ways, half each:
 * after the first chunk of a 200's body, or 20–500 ms after the request was
 * sent — whatever it was doing then: waiting in the queue, evaluating the
 * prompt, streaming. An answer that is not a 200 is read whole, never cut;
 * one that ends before the cut is due counts as answered.
 */
export async function http(ctx: OpContext, path: string, init: RequestInit, options: HttpOptions = {}): Promise<Result> {
  const controller = new AbortController();
  let timedOut = false;
  let cutFired = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, ctx.timeoutMs);
  const mode = ctx.cut && !options.then ? (ctx.rng() < 0.5 ? 'first-chunk' : 'delay') : 'none';
  const cutTimer =
    mode === 'delay'
      ? setTimeout(() => {
          cutFired = true;
          controller.abort();
        }, 20 + ctx.rng() * 480)
      : undefined;
  const request = options.request;
  try {
    const res = await fetch(`${ctx.base}${path}`, { ...init, headers: { ...(init.headers as Record<string, string> | undefined), ...ctx.headers }, signal: controller.signal });
    if (res.status !== 200) clearTimeout(cutTimer);
    if (mode === 'first-chunk' && res.status === 200 && res.body) {
      const reader = res.body.getReader();
      const first = await reader.read();
      if (first.done) return { outcome: '200' };
      controller.abort();
      return { outcome: 'cut' };
    }
    const body = Buffer.from(await res.arrayBuffer());
    clearTimeout(cutTimer);
    if (res.status !== 200) return { outcome: String(res.status), detail: short(body.toString('utf8')), request };
    if (options.check && !options.check(body)) return { outcome: 'error:incomplete', detail: short(body.toString('utf8')), request };
    if (options.then) return await options.then(body);
    return { outcome: '200' };
  } catch (error) {
    if (cutFired) return { outcome: 'cut' };
    if (timedOut) return { outcome: 'error:timeout', detail: `no complete answer within ${ctx.timeoutMs} ms`, request };
    return { outcome: errorKind(error), detail: errorText(error), request };
  } finally {
    clearTimeout(timer);
    clearTimeout(cutTimer);
  }
}

const json = (body: unknown): RequestInit => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const parses = (body: Buffer) => {
  try {
    JSON.parse(body.toString('utf8'));
    return true;
  } catch {
    return false;
  }
};
const form = (fields: Record<string, string>, files: Record<string, { data: Buffer; name: string; type: string }>): RequestInit => {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  for (const [k, v] of Object.entries(files)) f.append(k, new Blob([new Uint8Array(v.data)], { type: v.type }), v.name);
  return { method: 'POST', body: f };
};

/** What a request body looked like, for the error report (long fields shortened). */
function describe(path: string, body: Record<string, unknown>): string {
  const fields = Object.entries(body).map(([k, v]) => {
    const text = typeof v === 'string' ? JSON.stringify(v.length > 40 ? `${v.slice(0, 37)}…` : v) : JSON.stringify(v);
    return `${k}: ${text && text.length > 60 ? `${text.slice(0, 57)}…` : text}`;
  });
  return `POST ${path} {${fields.join(', ')}}`;
}

const WORDS = 'river mountain village bread oven winter summer market harbour lantern garden orchard library museum bridge tower engine signal copper silver forest meadow valley island'.split(' ');
const sentence = (rng: () => number, n: number) => Array.from({ length: n }, () => pick(rng, WORDS)).join(' ');

export interface Models {
  chat: string;
  embedding: string[];
  rerank: string;
  ocr: string[];
  asr: string[];
  asrStream: string;
  /** Synthesis models with the fields each needs. */
  tts: Array<{ model: string; fields: (inputs: Inputs) => Record<string, unknown> }>;
  image: string;
  vae: string;
}

/** Every op, one per route and model. */
export function allOps(models: Models, inputs: Inputs): Op[] {
  const ops: Op[] = [];

  ops.push({
    route: 'models',
    streamed: false,
    run: (ctx) => {
      const path = ctx.rng() < 0.5 ? '/v1/models' : `/v1/models/${models.chat}`;
      return http(ctx, path, { method: 'GET' }, { check: parses, request: `GET ${path}` });
    },
  });

  const chatBody = (ctx: OpContext, stream: boolean) => ({
    model: models.chat,
    messages: [{ role: 'user', content: sentence(ctx.rng, int(ctx.rng, 3, 20)) }],
    max_tokens: int(ctx.rng, 4, 32),
    temperature: 0.8,
    seed: int(ctx.rng, 0, 1000),
    ...(stream ? { stream: true, ...(ctx.rng() < 0.5 ? { stream_options: { include_usage: true } } : {}) } : {}),
  });
  ops.push({
    route: 'chat',
    model: models.chat,
    streamed: false,
    run: (ctx) => {
      const body = chatBody(ctx, false);
      return http(ctx, '/v1/chat/completions', json(body), { check: parses, request: describe('/v1/chat/completions', body) });
    },
  });
  ops.push({
    route: 'chat.stream',
    model: models.chat,
    streamed: true,
    run: (ctx) => {
      const body = chatBody(ctx, true);
      return http(ctx, '/v1/chat/completions', json(body), { check: (b) => b.toString('utf8').includes('data: [DONE]'), request: describe('/v1/chat/completions', body) });
    },
  });

  const anthropicBody = (ctx: OpContext, stream: boolean) => ({
    model: models.chat,
    max_tokens: int(ctx.rng, 4, 32),
    ...(ctx.rng() < 0.3 ? { system: 'Be brief.' } : {}),
    messages: [{ role: 'user', content: sentence(ctx.rng, int(ctx.rng, 3, 20)) }],
    ...(stream ? { stream: true } : {}),
  });
  const anthropicPath = (ctx: OpContext) => (ctx.rng() < 0.5 ? '/v1/anthropic/messages' : '/v1/messages');
  ops.push({
    route: 'anthropic',
    model: models.chat,
    streamed: false,
    run: (ctx) => {
      const body = anthropicBody(ctx, false);
      const path = anthropicPath(ctx);
      return http(ctx, path, json(body), { check: parses, request: describe(path, body) });
    },
  });
  ops.push({
    route: 'anthropic.stream',
    model: models.chat,
    streamed: true,
    run: (ctx) => {
      const body = anthropicBody(ctx, true);
      const path = anthropicPath(ctx);
      return http(ctx, path, json(body), { check: (b) => b.toString('utf8').includes('message_stop'), request: describe(path, body) });
    },
  });

  for (const model of models.embedding) {
    ops.push({
      route: 'embeddings',
      model,
      streamed: false,
      run: (ctx) => {
        const n = int(ctx.rng, 1, 8);
        const body = { model, input: n === 1 ? sentence(ctx.rng, 6) : Array.from({ length: n }, () => sentence(ctx.rng, int(ctx.rng, 2, 24))), encoding_format: pick(ctx.rng, ['float', 'base64']) };
        return http(ctx, '/v1/embeddings', json(body), { check: parses, request: describe('/v1/embeddings', body) });
      },
    });
  }

  ops.push({
    route: 'rerank',
    model: models.rerank,
    streamed: false,
    run: (ctx) => {
      const body = { model: models.rerank, query: sentence(ctx.rng, 4), documents: Array.from({ length: int(ctx.rng, 2, 8) }, () => sentence(ctx.rng, int(ctx.rng, 3, 20))) };
      return http(ctx, '/v1/rerank', json(body), { check: parses, request: describe('/v1/rerank', body) });
    },
  });

  for (const model of models.ocr) {
    ops.push({
      route: 'ocr',
      model,
      streamed: false,
      run: (ctx) => http(ctx, '/v1/ocr', form({ model }, { file: { data: inputs.ocrPng, name: 'line.png', type: 'image/png' } }), { check: parses, request: `POST /v1/ocr multipart {model: ${model}, file: line.png (${inputs.ocrPng.length} B)}` }),
    });
  }

  for (const model of models.asr) {
    ops.push({
      route: 'transcription',
      model,
      streamed: false,
      run: (ctx) => {
        const format = pick(ctx.rng, ['json', 'text', 'verbose_json', 'srt', 'vtt']);
        return http(ctx, '/v1/audio/transcriptions', form({ model, response_format: format }, { file: { data: inputs.wav, name: 'speech.wav', type: 'audio/wav' } }), {
          check: format.endsWith('json') ? parses : undefined,
          request: `POST /v1/audio/transcriptions multipart {model: ${model}, response_format: ${format}, file: speech.wav (${inputs.wav.length} B)}`,
        });
      },
    });
  }

  ops.push({ route: 'transcription.ws', model: models.asrStream, streamed: true, run: (ctx) => websocketStream(ctx, models.asrStream, inputs.pcm) });

  for (const tts of models.tts) {
    const speechBody = (ctx: OpContext, extra: Record<string, unknown>) => ({ model: tts.model, input: `${sentence(ctx.rng, int(ctx.rng, 2, 6))}.`, ...tts.fields(inputs), ...extra });
    ops.push({
      route: 'speech',
      model: tts.model,
      streamed: false,
      run: (ctx) => {
        const body = speechBody(ctx, {});
        return http(ctx, '/v1/audio/speech', json(body), {
          check: parses,
          request: describe('/v1/audio/speech', body),
          // The one-shot answer names a file: fetch it too.
          then: (answer) => http({ ...ctx, cut: false }, (JSON.parse(answer.toString('utf8')) as { audio_url: string }).audio_url, { method: 'GET' }, { request: 'GET audio_url' }),
        });
      },
    });
    ops.push({
      route: 'speech.bytes',
      model: tts.model,
      streamed: true,
      run: (ctx) => {
        const body = speechBody(ctx, { response_format: pick(ctx.rng, SPEECH_FORMATS) });
        return http(ctx, '/v1/audio/speech', json(body), { check: (b) => b.length > 0, request: describe('/v1/audio/speech', body) });
      },
    });
    ops.push({
      route: 'speech.stream',
      model: tts.model,
      streamed: true,
      run: (ctx) => {
        const body = speechBody(ctx, { stream: true, ...(ctx.rng() < 0.5 ? { response_format: pick(ctx.rng, SPEECH_FORMATS) } : {}) });
        const request = describe('/v1/audio/speech', body);
        // The job is always claimed (an unclaimed one holds its lease for 5 minutes by design); the GET is what may be cut.
        return http({ ...ctx, cut: false }, '/v1/audio/speech', json(body), {
          check: parses,
          request,
          then: async (answer) => {
            const url = (JSON.parse(answer.toString('utf8')) as { stream_url: string }).stream_url;
            const r = await http(ctx, url, { method: 'GET' }, { check: (b) => b.length > 0, request: `GET ${url.replace(/[^/]+$/, '<token>')} after ${request}` });
            return r;
          },
        });
      },
    });
  }

  const imageCommon = (ctx: OpContext) => ({ model: models.image, prompt: sentence(ctx.rng, int(ctx.rng, 2, 8)), size: '64x64', seed: int(ctx.rng, 0, 1000), response_format: ctx.rng() < 0.7 ? 'b64_json' : 'url' });
  for (const vae of [undefined, models.vae]) {
    ops.push({
      route: 'images.generations',
      model: vae ? `${models.image} (vae ${vae})` : models.image,
      streamed: false,
      run: (ctx) => {
        const body = { ...imageCommon(ctx), steps: 1, ...(vae ? { vae } : {}) };
        return http(ctx, '/v1/images/generations', json(body), { check: parses, request: describe('/v1/images/generations', body) });
      },
    });
  }
  ops.push({
    route: 'images.img2img',
    model: models.image,
    streamed: false,
    run: (ctx) => {
      const common = imageCommon(ctx);
      const fields = { ...Object.fromEntries(Object.entries(common).map(([k, v]) => [k, String(v)])), strength: String(pick(ctx.rng, [0.3, 0.5, 0.8])), steps: '2' };
      return http(ctx, '/v1/images/img2img', form(fields, { image: { data: inputs.picture, name: 'image.png', type: 'image/png' } }), { check: parses, request: `POST /v1/images/img2img multipart ${JSON.stringify(fields).replace(/"prompt":"[^"]*"/, '"prompt":…')} + image.png 64×64` });
    },
  });
  ops.push({
    route: 'images.edits',
    model: models.image,
    streamed: false,
    run: (ctx) => {
      const body = { ...imageCommon(ctx), steps: 1, image: inputs.holed.toString('base64') };
      return http(ctx, '/v1/images/edits', json(body), { check: parses, request: describe('/v1/images/edits', body) });
    },
  });

  return ops;
}

/**
 * GET /v1/audio/transcriptions/stream: 100 ms PCM16 frames every 20 ms (5×
 * real time; the server pauses the socket if it falls behind), then
 * `{"type":"end"}` and the server's close. Cut: the socket is destroyed
 * (no close frame) after a random number of frames.
 */
export function websocketStream(ctx: OpContext, model: string, pcm: Buffer): Promise<Result> {
  const frame = 3200;
  const frames = Math.ceil(pcm.length / frame);
  const request = `WS /v1/audio/transcriptions/stream?model=${model}, ${frames} frames of 100 ms`;
  return new Promise<Result>((resolve) => {
    let done = false;
    let lastError: string | undefined;
    const socket = new WebSocket(`${ctx.base.replace(/^http/, 'ws')}/v1/audio/transcriptions/stream?model=${encodeURIComponent(model)}`, { headers: ctx.headers });
    const finish = (result: Result) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(result);
    };
    const timer = setTimeout(() => {
      socket.terminate();
      finish({ outcome: 'error:timeout', detail: `no close within ${ctx.timeoutMs} ms`, request });
    }, ctx.timeoutMs);
    socket.on('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString('utf8')));
      res.on('end', () => {
        finish({ outcome: String(res.statusCode), detail: short(body), request });
        req.destroy();
      });
      res.on('error', () => finish({ outcome: String(res.statusCode), detail: short(body), request }));
    });
    socket.on('error', (error) => finish({ outcome: errorKind(error), detail: errorText(error), request }));
    socket.on('message', (data) => {
      try {
        const message = JSON.parse(String(data)) as { error?: { message?: string } };
        if (message.error) lastError = message.error.message;
      } catch {
        lastError = `not JSON: ${short(String(data), 80)}`;
      }
    });
    socket.on('close', (code, reason) => {
      if (code === 1000) finish({ outcome: 'ws:1000' });
      else finish({ outcome: `ws:${code}`, detail: short(`${reason.toString('utf8')}${lastError ? ` / ${lastError}` : ''}`), request });
    });
    socket.on('open', () => {
      void (async () => {
        const cutAfter = ctx.cut ? 1 + Math.floor(ctx.rng() * (frames - 1)) : Number.POSITIVE_INFINITY;
        for (let i = 0; i < frames; i++) {
          if (done || socket.readyState !== WebSocket.OPEN) return;
          if (i >= cutAfter) {
            finish({ outcome: 'cut' });
            socket.terminate();
            return;
          }
          socket.send(pcm.subarray(i * frame, (i + 1) * frame));
          await sleep(20);
        }
        if (!done && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'end' }));
      })();
    });
  });
}
