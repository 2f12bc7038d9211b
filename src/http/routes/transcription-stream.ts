import type { WebSocket } from 'ws';
import type { StreamingRecognizer } from '../../backends/sherpa/streaming.js';
import { pcm16ToFloat32 } from '../../audio/pcm.js';
import { InvalidRequestError, isLserveError, type LserveError } from '../../core/errors.js';
import { defaultStreamingModel } from '../../core/tasks/transcribe.js';
import type { Lease } from '../../core/manager.js';
import type { WebSocketRoute } from '../websocket.js';

/**
 * GET /v1/audio/transcriptions/stream?model=<id>: live recognition over a
 * WebSocket. Binary frames of PCM16 LE 16 kHz mono in (any size, an even
 * number of bytes); JSON `{"text","is_final"}` out: partials while an
 * utterance goes on, a final at each endpoint (the next utterance starts
 * from empty text), and a last final after `{"type":"end"}`, then a normal
 * close. Errors are a JSON `{"error":{…}}` message and a close code:
 * 4400 bad input, 4404 unknown or non-streaming model, 4408 idle too long,
 * 1011 recognizer failure. When the server already runs its maximum of
 * streams, the upgrade itself is refused (503).
 */

/** A connection that sends no audio for this long is closed (4408); `streamIdleMs` in the server options overrides it. */
export const STREAM_IDLE_MS = 30_000;

const CLOSE = { normal: 1000, failure: 1011, badInput: 4400, unknownModel: 4404, idle: 4408 } as const;

export const transcriptionStreamRoute: WebSocketRoute = {
  path: '/v1/audio/transcriptions/stream',
  async accept(_req, url, ctx) {
    let lease: Lease<StreamingRecognizer>;
    try {
      lease = await ctx.engine.acquire<StreamingRecognizer>(url.searchParams.get('model') ?? (await defaultStreamingModel(ctx.engine)), ['asr-stream']);
    } catch (error) {
      // A model problem is told over the socket, as a message and a 4404/4400 close.
      if (isLserveError(error) && error.status < 500) return (socket) => refuse(socket, error);
      throw error;
    }
    let stream;
    try {
      stream = lease.model.open(); // OverloadedError: the upgrade is refused with 503
    } catch (error) {
      lease.release();
      throw error;
    }
    return (socket) => {
      let idle: NodeJS.Timeout | undefined;
      const idleMs = ctx.options.streamIdleMs ?? STREAM_IDLE_MS;
      const touch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => fail(new InvalidRequestError(`No audio for ${idleMs / 1000} s: closing.`, { code: 'idle_timeout' }), CLOSE.idle), idleMs);
      };
      let over = false;
      const end = () => {
        if (over) return;
        over = true;
        clearTimeout(idle);
        stream.close();
        lease.release();
      };
      const fail = (error: LserveError, code: number) => {
        if (socket.readyState === socket.OPEN) {
          socket.send(JSON.stringify(errorMessage(error)));
          socket.close(code, error.message.slice(0, 120));
        }
        end();
      };
      stream.on('result', (result) => {
        if (socket.readyState === socket.OPEN) socket.send(JSON.stringify({ text: result.text, is_final: result.isFinal }));
      });
      stream.on('error', (error) => fail(error, CLOSE.failure));
      stream.on('end', () => {
        if (socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'end of stream');
        end();
      });
      // The recognizer fell behind: stop reading the socket until it catches up (TCP slows the client down).
      stream.on('drain', () => socket.resume());
      socket.on('message', (data, isBinary) => {
        touch();
        const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
        if (!isBinary) return control(bytes.toString('utf8'));
        if (bytes.length % 2 !== 0) return fail(new InvalidRequestError(`Audio frames are PCM16: an even number of bytes (got ${bytes.length}).`, { code: 'invalid_audio' }), CLOSE.badInput);
        if (!stream.push(pcm16ToFloat32(bytes))) socket.pause();
      });
      const control = (text: string) => {
        let message: unknown;
        try {
          message = JSON.parse(text);
        } catch {
          return fail(new InvalidRequestError('Text messages must be JSON, e.g. {"type":"end"}.', { code: 'invalid_message' }), CLOSE.badInput);
        }
        if (typeof message === 'object' && message !== null && (message as { type?: unknown }).type === 'end') {
          clearTimeout(idle);
          return stream.finish();
        }
        fail(new InvalidRequestError('Unknown message: the only text message is {"type":"end"}.', { code: 'invalid_message' }), CLOSE.badInput);
      };
      socket.on('close', end);
      socket.on('error', end);
      touch();
    };
  },
};

function errorMessage(error: LserveError): { error: { message: string; type: string; code: string | null } } {
  return { error: { message: error.message, type: error.type, code: error.code } };
}

function refuse(socket: WebSocket, error: LserveError): void {
  socket.send(JSON.stringify(errorMessage(error)));
  socket.close(error.status === 404 ? CLOSE.unknownModel : CLOSE.badInput, error.message.slice(0, 120));
}
