import type { IncomingMessage } from 'node:http';
import type { RawData, WebSocket } from 'ws';
import { defaultSessionConfig } from '../../api/realtime/session-config.js';
import { errorEvent } from '../../api/realtime/server-events.js';
import type { Dialect } from '../../api/realtime/types.js';
import { InvalidRequestError, OverloadedError, isLserveError, type LserveError } from '../../core/errors.js';
import { guarded } from '../../core/guard.js';
import { RealtimeSession } from '../../realtime/session.js';
import { referenceAudio } from '../reference-audio.js';
import type { WebSocketRoute } from '../websocket.js';

/**
 * GET /v1/realtime?model=<chat model>: OpenAI's Realtime API over one
 * WebSocket (src/realtime/session.ts does the session; this is the socket).
 * Text frames, one JSON event each, both ways. The GA dialect by default;
 * `OpenAI-Beta: realtime=v1` (or the subprotocol `openai-beta.realtime-v1`,
 * as browsers send it) for the beta's. `?intent=transcription` opens a
 * transcription session (the beta's way; GA clients, whose SDKs connect
 * with a model, send session.update with `type: "transcription"` before
 * their conversation begins).
 *
 * Bounds: MAX_SESSIONS at once (503 at the upgrade beyond), a frame of at
 * most MAX_FRAME_BYTES (1009), EVENTS_PER_SECOND on average with a burst of
 * twice that (beyond: an `error` event and the event dropped), and
 * MAX_SESSION_MS (OpenAI's 60 minutes) after which the session ends with an
 * `error` event and a normal close. A binary frame or a bad event is an
 * `error` event; the session goes on.
 */

/** One input_audio_buffer.append of 15 MiB of base64 (OpenAI's limit) with the rest of its event. */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;
export const MAX_SESSIONS = 64;
export const EVENTS_PER_SECOND = 200;
export const MAX_SESSION_MS = 60 * 60_000;

/** Sessions open now, per server (several servers may share a process). */
const openSessions = new WeakMap<object, number>();

export const realtimeRoute: WebSocketRoute = {
  path: '/v1/realtime',
  maxFrameBytes: MAX_FRAME_BYTES,
  async accept(req, url, ctx) {
    const open = openSessions.get(ctx) ?? 0;
    if (open >= MAX_SESSIONS) throw new OverloadedError(`This server runs at most ${MAX_SESSIONS} realtime sessions at once.`);
    const dialect = dialectOf(req);
    const transcription = url.searchParams.get('intent') === 'transcription';
    const model = url.searchParams.get('model') ?? '';
    let refusal: LserveError | undefined;
    // The installed model (the query may name an alias): what metrics label.
    let installed = model;
    try {
      if (!transcription) {
        if (!model) throw new InvalidRequestError("The 'model' query parameter names the chat model: /v1/realtime?model=<id>.", { param: 'model', code: 'missing_required_parameter' });
        installed = (await ctx.engine.resolve(model, ['chat'])).id;
      }
    } catch (error) {
      // Told over the socket, as an error event and a close, where an SDK shows it.
      if (!isLserveError(error) || error.status >= 500) throw error;
      refusal = error;
    }
    openSessions.set(ctx, open + 1);
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      openSessions.set(ctx, (openSessions.get(ctx) ?? 1) - 1);
    };
    return {
      abandon: release,
      open: (socket: WebSocket) => {
        if (refusal) {
          socket.send(JSON.stringify(errorEvent(refusal)));
          socket.close(refusal.status === 404 ? 4404 : 4400, refusal.message.slice(0, 120));
          return release();
        }
        const config = defaultSessionConfig(model, transcription ? 'transcription' : 'realtime');
        const engine = ctx.engine;
        const session = new RealtimeSession(
          {
            engine,
            dialect,
            send: (event) => {
              if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(event));
            },
            log: ctx.options.log,
            voiceLatency: (seconds) => engine.report({ type: 'voice-latency', model: installed, seconds }),
            speculate: ctx.options.speculativeTurns,
            warm: ctx.options.warmAnswers,
            readReferenceAudio: (value, param, signal) => referenceAudio(value, ctx, signal, param),
          },
          config,
        );
        engine.report({ type: 'realtime-session', sessionType: config.type, change: 1 });
        const limit = new TokenBucket(EVENTS_PER_SECOND, EVENTS_PER_SECOND * 2);
        const expire = setTimeout(() => {
          socket.send(JSON.stringify(errorEvent({ type: 'invalid_request_error', code: 'session_expired', message: `Sessions last at most ${MAX_SESSION_MS / 60_000} minutes: open a new one.` })));
          socket.close(1000, 'session expired');
        }, MAX_SESSION_MS);
        expire.unref();
        const end = () => {
          clearTimeout(expire);
          if (!counted) return;
          session.close();
          engine.report({ type: 'realtime-session', sessionType: config.type, change: -1 });
          release();
        };
        const say = (error: LserveError) => socket.readyState === socket.OPEN && socket.send(JSON.stringify(errorEvent(error)));
        socket.on(
          'message',
          guarded(
            (data: RawData, isBinary: boolean) => {
              if (!limit.take()) return say(new InvalidRequestError(`More than ${EVENTS_PER_SECOND} events a second: this one was dropped.`, { code: 'rate_limit_exceeded' }));
              if (isBinary) return say(new InvalidRequestError('Events are JSON text frames; audio goes base64 in input_audio_buffer.append.', { code: 'invalid_event' }));
              session.receive(Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.concat(data as Buffer[]).toString('utf8'));
            },
            (error) => say(isLserveError(error) ? error : new InvalidRequestError('The event could not be read.', { code: 'invalid_event' })),
          ),
        );
        socket.on('close', end);
        // A protocol fault (server.ts closes the socket): the session ends with it.
        socket.on('error', end);
        session.open();
      },
    };
  },
};

function dialectOf(req: IncomingMessage): Dialect {
  const beta = String(req.headers['openai-beta'] ?? '');
  const protocols = String(req.headers['sec-websocket-protocol'] ?? '');
  return /realtime=v1/.test(beta) || /(^|,)\s*openai-beta\.realtime-v1\s*(,|$)/.test(protocols) ? 'beta' : 'ga';
}

/** Events allowed: `rate` a second on average, `burst` at once. */
class TokenBucket {
  private tokens: number;
  private last = performance.now();

  constructor(
    private readonly rate: number,
    private readonly burst: number,
  ) {
    this.tokens = burst;
  }

  take(): boolean {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) * this.rate) / 1000);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens--;
    return true;
  }
}
