import { Router, type Request, type Response } from 'express';
import { createEncoder } from '../../audio/encode/index.js';
import { speechRequestSchema, toSpeakRequest, type SpeechFormat, type SpeechJobResponse, type SpeechRequestBody, type SpeechResponse } from '../../api/speech.js';
import { parseRequest } from '../../api/validate.js';
import type { FileStore } from '../../core/files/store.js';
import { NotFoundError } from '../../core/errors.js';
import { prepareSpeech, type PreparedSpeech } from '../../core/tasks/speak.js';
import { sendCachedFile } from '../cached-file.js';
import { requestSignal, type ServerContext } from '../context.js';
import { referenceAudio } from '../reference-audio.js';
import { SpeechStreamJobs } from '../speech-stream-jobs.js';

/** One-shot speech files are served for an hour, at most 1 GiB of them. */
export const SPEECH_FILE_TTL_MS = 60 * 60_000;
export const SPEECH_FILES_MAX_BYTES = 1024 ** 3;

const CONTENT_TYPES: Record<string, SpeechFormat> = {
  'audio/mpeg': 'mp3',
  'audio/mp3': 'mp3',
  'audio/wav': 'wav',
  'audio/wave': 'wav',
  'audio/x-wav': 'wav',
  'audio/ogg': 'opus',
  'audio/opus': 'opus',
  'audio/flac': 'flac',
  'audio/pcm': 'pcm',
  'audio/l16': 'pcm',
};

/**
 * POST /v1/audio/speech and what it hands out:
 * - `stream: true` → `{stream_url}` for GET /v1/audio/speech/stream/:token
 *   (chunked audio as it is synthesised; single use; expires);
 * - `response_format`, or an `Accept` asking for audio or octet-stream
 *   (OpenAI's SDKs) → the audio bytes themselves, streamed as they exist;
 * - otherwise the specification's `{audio_url, sample_rate, duration}`, the
 *   file served from GET /v1/audio/files/:name until it expires.
 */
export function speechRouter(ctx: ServerContext): Router {
  const router = Router();
  const files = ctx.files.open('audio', {
    ttlMs: SPEECH_FILE_TTL_MS,
    maxBytes: SPEECH_FILES_MAX_BYTES,
    types: { wav: 'audio/wav' },
  });
  // A job's GET prepares the speech again from the stored request when it lands on another replica than its POST.
  const jobs = new SpeechStreamJobs(ctx.state.speechJobs, async (stored, signal) => {
    const body = parseRequest(speechRequestSchema, stored);
    return { speech: (await prepare(body, ctx, signal)).speech, format: body.response_format ?? 'wav' };
  });
  ctx.shutdown.addEventListener('abort', () => jobs.close(), { once: true });

  router.post('/v1/audio/speech', async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    await unlessGone(res, signal, async () => {
      const body = parseRequest(speechRequestSchema, req.body);
      const { speech, refAudio } = await prepare(body, ctx, signal);
      if (body.stream) {
        const token = await jobs.create(speech, body.response_format ?? 'wav', storedRequest(req.body, speech.model, refAudio));
        res.json({ stream_url: `/v1/audio/speech/stream/${token}` } satisfies SpeechJobResponse);
        return;
      }
      const direct = body.response_format ?? formatAccepted(req);
      if (direct) {
        await streamSpeech(res, speech, direct, signal, ctx.options.log);
        return;
      }
      res.json(await oneShot(speech, files, signal));
    });
  });

  router.get('/v1/audio/speech/stream/:token', async (req, res) => {
    const job = await jobs.claim(req.params.token);
    if (!job) throw new NotFoundError('No speech stream job with this token: it was already fetched, it expired, or it never existed.', { code: 'stream_not_found' });
    const signal = requestSignal(req, res, ctx.shutdown);
    await unlessGone(res, signal, async () => {
      const { speech, format } = await job.prepare(signal);
      await streamSpeech(res, speech, format, signal, ctx.options.log);
    });
  });

  router.get('/v1/audio/files/:name', async (req, res) => {
    await sendCachedFile(req, res, files, req.params.name, 'audio file');
  });

  return router;
}

/** Checks `body` and loads its model: every bad request is a 4xx here, before any audio. Returns the reference audio read too. */
async function prepare(body: SpeechRequestBody, ctx: ServerContext, signal: AbortSignal): Promise<{ speech: PreparedSpeech; refAudio?: Buffer }> {
  const refAudio = body.ref_audio === undefined ? undefined : await referenceAudio(body.ref_audio, ctx, signal);
  const speech = await prepareSpeech(ctx.engine, toSpeakRequest(body, refAudio), signal);
  return { speech, refAudio };
}

/**
 * A stream job's request as the state store keeps it: the fields of the
 * request body as sent (it passed the schema; parsed values such as
 * keep_alive's milliseconds would not pass it again), with the model it
 * resolved to and the reference audio's bytes inline (a path or URL may not
 * be readable from, or mean the same to, the replica that serves the job).
 * Its size is bounded by the body and upload limits.
 */
function storedRequest(raw: Record<string, unknown>, model: string, refAudio: Buffer | undefined): Record<string, unknown> {
  const fields = Object.fromEntries(Object.keys(speechRequestSchema.shape).flatMap((key) => (key in raw ? [[key, raw[key]]] : [])));
  return { ...fields, model, ...(refAudio && { ref_audio: `data:;base64,${refAudio.toString('base64')}` }) };
}

/** Synthesises the whole input into a WAV file in the file store. */
async function oneShot(speech: PreparedSpeech, files: FileStore, signal: AbortSignal): Promise<SpeechResponse> {
  const encoder = await createEncoder('wav', speech.sampleRate);
  const chunks: Uint8Array[] = [];
  const { samples } = await speech.run((block) => chunks.push(...encoder.write(block)), signal);
  chunks.push(...encoder.end());
  const file = await files.put(Buffer.concat(chunks), 'wav');
  return { audio_url: `/v1/audio/files/${file.name}`, sample_rate: speech.sampleRate, duration: samples / speech.sampleRate };
}

/**
 * Chunked audio, first bytes as soon as the first block is encoded. Headers
 * go out with the first audio, so a failure before it is still a JSON error;
 * after it, the connection is cut (a chunked body without its end), which
 * clients report as a broken download rather than a short file.
 */
async function streamSpeech(res: Response, speech: PreparedSpeech, format: SpeechFormat, signal: AbortSignal, log: (message: string) => void): Promise<void> {
  let encoder;
  try {
    encoder = await createEncoder(format, speech.sampleRate, { streaming: true });
  } catch (error) {
    speech.release();
    throw error;
  }
  const send = (chunks: Uint8Array[]) => {
    if (!res.headersSent) {
      res.status(200).set({ 'Content-Type': encoder.contentType, 'X-Sample-Rate': String(encoder.sampleRate), 'Cache-Control': 'no-store' });
      res.flushHeaders();
    }
    for (const chunk of chunks) if (chunk.byteLength > 0) res.write(chunk);
  };
  try {
    await speech.run((block) => send(encoder.write(block)), signal);
    send(encoder.end());
    res.end();
  } catch (error) {
    if (!res.headersSent || signal.aborted) throw error;
    log(`speech stream failed after it started: ${(error as Error).message}`);
    res.destroy(error as Error);
  }
}

/** Runs a handler whose failure is nobody's business once the client left (or the server is stopping): no 500 is logged for a hang-up. */
async function unlessGone(res: Response, signal: AbortSignal, handler: () => Promise<void>): Promise<void> {
  try {
    await handler();
  } catch (error) {
    if (!signal.aborted) throw error;
    res.destroy();
  }
}

/** The audio format an `Accept` header asks for, when it asks for audio rather than JSON (OpenAI's default: mp3). */
function formatAccepted(req: Request): SpeechFormat | undefined {
  const types = (req.headers.accept ?? '')
    .split(',')
    .map((part) => part.split(';')[0]!.trim().toLowerCase())
    .filter(Boolean);
  if (types.includes('application/json')) return undefined;
  for (const type of types) {
    if (CONTENT_TYPES[type]) return CONTENT_TYPES[type];
    if (type === 'audio/*' || type === 'application/octet-stream') return 'mp3';
  }
  return undefined;
}
