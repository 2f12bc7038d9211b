import type { RawData, WebSocket } from 'ws';
import type { StreamingRecognizer } from '../../core/tasks/transcribe/streaming.js';
import { pcm16ToFloat32 } from '../../audio/pcm.js';
import { InvalidRequestError, isLserveError, type LserveError } from '../../core/errors.js';
import { defaultStreamingModel } from '../../core/tasks/transcribe.js';
import type { Lease } from '../../core/manager.js';
import type { WebSocketRoute } from '../websocket.js';
import { toLserveError } from '../errors.js';
import { guarded } from '../../core/guard.js';

/**
 * GET /v1/audio/transcriptions/stream?model=<id>: live recognition over a
 * WebSocket. Binary frames of PCM16 LE 16 kHz mono in (an even number of
 * bytes, at most MAX_FRAME_BYTES each); JSON `{"text","is_final"}` out:
 * partials while an utterance goes on, a final at each endpoint (the next
 * utterance starts from empty text), and a last final after `{"type":"end"}`,
 * then a normal close. Errors are a JSON `{"error":{…}}` message and a close
 * code: 4400 bad input (audio after `end` included), 1009 a frame over the
 * limit, 4404 unknown or non-streaming model, 4408 idle too long, 1013 audio
 * arriving faster than it is recognised, 1011 recognizer failure. When the
 * server already runs its maximum of streams, the upgrade itself is refused
 * (503). Every handler below runs inside one error boundary: whatever a
 * client sends ends at most its own stream.
 */

/** A connection that sends no audio for this long is closed (4408); `streamIdleMs` in the server options overrides it. */
export const STREAM_IDLE_MS = 30_000;

/** Largest binary frame: 10 s of audio (ws closes larger ones with 1009 before they are buffered whole). */
export const MAX_FRAME_BYTES = 10 * 16_000 * 2;

const CLOSE = { normal: 1000, tooBig: 1009, failure: 1011, tryLater: 1013, badInput: 4400, unknownModel: 4404, idle: 4408 } as const;

/** The close code for an error: the client's fault is a 44xx/1009, a full server 1013, anything else 1011. */
function closeCode(error: LserveError): number {
  if (error.code === 'idle_timeout') return CLOSE.idle;
  if (error.status === 413) return CLOSE.tooBig;
  if (error.status === 503) return CLOSE.tryLater;
  return error.status < 500 ? CLOSE.badInput : CLOSE.failure;
}

export const transcriptionStreamRoute: WebSocketRoute = {
  path: '/v1/audio/transcriptions/stream',
  maxFrameBytes: MAX_FRAME_BYTES,
  async accept(_req, url, ctx) {
    let lease: Lease<StreamingRecognizer>;
    try {
      lease = await ctx.engine.acquire<StreamingRecognizer>(url.searchParams.get('model') ?? (await defaultStreamingModel(ctx.engine)), ['asr-stream']);
    } catch (error) {
      // A model problem is told over the socket, as a message and a 4404/4400 close.
      if (isLserveError(error) && error.status < 500) return { open: (socket) => refuse(socket, error), abandon: () => {} };
      throw error;
    }
    let stream;
    try {
      stream = lease.model.open(); // OverloadedError: the upgrade is refused with 503
    } catch (error) {
      ctx.engine.reportRejection(lease.installed.id, error);
      lease.release();
      throw error;
    }
    const release = () => {
      stream.close();
      lease.release();
    };
    const open = (socket: WebSocket) => {
      let idle: NodeJS.Timeout | undefined;
      const idleMs = ctx.options.streamIdleMs ?? STREAM_IDLE_MS;
      let finishing = false;
      let over = false;
      const end = () => {
        if (over) return;
        over = true;
        clearTimeout(idle);
        release();
      };
      const fail = (error: unknown) => {
        const typed = toLserveError(error);
        if (typed.status >= 500 && typed.status !== 503) ctx.options.log(`error on ${url.pathname}: ${(typed.cause as Error)?.stack ?? typed.stack}`);
        if (socket.readyState === socket.OPEN) {
          socket.send(JSON.stringify(errorMessage(typed)));
          socket.close(closeCode(typed), typed.message.slice(0, 120));
        }
        end();
      };
      /** Every handler below runs inside this boundary: what it throws fails this stream only. */
      const guard = <A extends unknown[]>(handler: (...args: A) => void) => guarded(handler, fail);
      const touch = () => {
        clearTimeout(idle);
        idle = setTimeout(guard(() => fail(new InvalidRequestError(`No audio for ${idleMs / 1000} s: closing.`, { code: 'idle_timeout' }))), idleMs);
      };
      const control = (text: string) => {
        let message: unknown;
        try {
          message = JSON.parse(text);
        } catch {
          throw new InvalidRequestError('Text messages must be JSON, e.g. {"type":"end"}.', { code: 'invalid_message' });
        }
        if (typeof message !== 'object' || message === null || (message as { type?: unknown }).type !== 'end') {
          throw new InvalidRequestError('Unknown message: the only text message is {"type":"end"}.', { code: 'invalid_message' });
        }
        if (finishing) return; // a second end changes nothing
        finishing = true;
        clearTimeout(idle);
        stream.finish();
      };
      stream.on('result', guard((result) => {
        if (socket.readyState === socket.OPEN) socket.send(JSON.stringify({ text: result.text, is_final: result.isFinal }));
      }));
      stream.on('error', guard((error) => fail(error)));
      stream.on('end', guard(() => {
        if (socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'end of stream');
        end();
      }));
      // The recognizer fell behind: stop reading the socket until it catches up (TCP slows the client down).
      stream.on('drain', guard(() => socket.resume()));
      socket.on('message', guard((data: RawData, isBinary: boolean) => {
        if (over) return;
        const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
        if (!isBinary) return control(bytes.toString('utf8'));
        if (finishing) throw new InvalidRequestError('Audio after {"type":"end"}: the stream is finishing; open a new one for more audio.', { code: 'audio_after_end' });
        touch();
        if (bytes.length % 2 !== 0) throw new InvalidRequestError(`Audio frames are PCM16: an even number of bytes (got ${bytes.length}).`, { code: 'invalid_audio' });
        const samples = pcm16ToFloat32(bytes);
        ctx.engine.report({ type: 'transcription', model: lease.installed.id, audioSeconds: samples.length / lease.model.sampleRate });
        if (!stream.push(samples)) socket.pause();
      }));
      socket.on('close', guard(end));
      // A protocol fault (see server.ts, which closes the socket): the stream ends with it.
      socket.on('error', guard(end));
      touch();
    };
    return { open, abandon: release };
  },
};

function errorMessage(error: LserveError): { error: { message: string; type: string; code: string | null } } {
  return { error: { message: error.message, type: error.type, code: error.code } };
}

function refuse(socket: WebSocket, error: LserveError): void {
  socket.send(JSON.stringify(errorMessage(error)));
  socket.close(error.status === 404 ? CLOSE.unknownModel : CLOSE.badInput, error.message.slice(0, 120));
}
