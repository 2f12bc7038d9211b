import { messageOf, serveSherpaChild } from './child.js';
import type { RecognizerProtocol } from './protocol.js';
import type { OnlineRecognizer, OnlineStream } from './sherpa-onnx.js';

/**
 * The streaming recognizer's child process (child.ts for what every child
 * does, recognizer.ts for the server's side): OnlineRecognizers by model key,
 * streams by id.
 *
 * Decoding runs in slices so IPC is never starved: each turn of the pump
 * decodes at most one chunk per ready stream (batched per recognizer with
 * decodeStreams, up to MAX_BATCH = 4 streams per recognizer, the
 * longest-waiting first; ≈ 4 × 40 ms on one core for an encoder with a real
 * chunk-16 Zipformer's compute, measured on a synthetic one), sends
 * the results, and yields to the event loop (setImmediate) before the next
 * turn, so new audio, `finish` and `close` messages are taken in between.
 */

const MAX_BATCH = 4;
/** The rate sherpa-onnx's feature extractor is given audio at (the padding at `finish`). */
const SAMPLE_RATE = 16000;

interface StreamState {
  sid: number;
  key: string;
  recognizer: OnlineRecognizer;
  stream: OnlineStream;
  /** The current utterance's text as last sent. */
  text: string;
  segment: number;
  finished: boolean;
  /** Samples received, and up to which `progress` was sent. */
  accepted: number;
  acknowledged: number;
  /** The pump's turn that last decoded this stream (the longest-waiting go first). */
  lastTurn: number;
}

serveSherpaChild<RecognizerProtocol, OnlineRecognizer>('recognizer', (sherpa, send, recognizerFor) => {
  const streams = new Map<number, StreamState>();
  let scheduled = false;
  let turn = 0;

  function fail(sid: number, error: unknown): void {
    streams.delete(sid);
    send({ t: 'error', sid, error: messageOf(error) });
  }

  function schedule(): void {
    if (scheduled) return;
    scheduled = true;
    setImmediate(pump);
  }

  function pump(): void {
    scheduled = false;
    turn++;
    const ready = new Map<OnlineRecognizer, StreamState[]>();
    for (const s of streams.values()) {
      try {
        if (!s.recognizer.isReady(s.stream)) continue;
      } catch (error) {
        fail(s.sid, error);
        continue;
      }
      const list = ready.get(s.recognizer);
      if (list) list.push(s);
      else ready.set(s.recognizer, [s]);
    }
    let more = false;
    for (const [recognizer, list] of ready) {
      list.sort((a, b) => a.lastTurn - b.lastTurn);
      const batch = list.slice(0, MAX_BATCH);
      if (list.length > batch.length) more = true;
      try {
        if (batch.length === 1) recognizer.decode(batch[0]!.stream);
        else recognizer.decodeStreams(batch.map((s) => s.stream));
      } catch (error) {
        for (const s of batch) fail(s.sid, error);
        continue;
      }
      for (const s of batch) {
        s.lastTurn = turn;
        try {
          advance(s);
          if (recognizer.isReady(s.stream)) more = true;
        } catch (error) {
          fail(s.sid, error);
        }
      }
    }
    for (const s of [...streams.values()]) {
      try {
        if (s.recognizer.isReady(s.stream)) continue;
        if (s.accepted > s.acknowledged) {
          s.acknowledged = s.accepted;
          send({ t: 'progress', sid: s.sid, consumed: s.accepted });
        }
        if (s.finished) {
          send({ t: 'result', sid: s.sid, text: s.text, isFinal: true, segment: s.segment });
          send({ t: 'end', sid: s.sid });
          streams.delete(s.sid);
        }
      } catch (error) {
        fail(s.sid, error);
      }
    }
    if (more) schedule();
  }

  /** After a decode: a partial if the text changed; at an endpoint a final (when there is text), then a fresh utterance. */
  function advance(s: StreamState): void {
    const text = s.recognizer.getResult(s.stream).text.trim();
    if (text !== s.text) {
      s.text = text;
      send({ t: 'result', sid: s.sid, text, isFinal: false, segment: s.segment });
    }
    if (s.recognizer.isEndpoint(s.stream)) {
      if (text) {
        send({ t: 'result', sid: s.sid, text, isFinal: true, segment: s.segment });
        s.segment++;
      }
      s.recognizer.reset(s.stream);
      s.text = '';
    }
  }

  return {
    create: (config) => ({ model: new sherpa.OnlineRecognizer(config) }),
    dropped(key) {
      for (const [sid, s] of streams) if (s.key === key) streams.delete(sid);
    },
    failed(msg, error) {
      fail(msg.sid, error);
    },
    handle(msg) {
      switch (msg.t) {
        case 'open': {
          const recognizer = recognizerFor(msg.key);
          streams.set(msg.sid, {
            sid: msg.sid,
            key: msg.key,
            recognizer,
            stream: recognizer.createStream(),
            text: '',
            segment: 0,
            finished: false,
            accepted: 0,
            acknowledged: 0,
            lastTurn: 0,
          });
          return;
        }
        case 'audio': {
          const s = streams.get(msg.sid);
          if (!s || s.finished) return;
          s.stream.acceptWaveform({ samples: msg.samples, sampleRate: msg.sampleRate });
          s.accepted += msg.samples.length;
          schedule();
          return;
        }
        case 'finish': {
          const s = streams.get(msg.sid);
          if (!s || s.finished) return;
          // The encoder needs a whole window (T frames) beyond the last chunk: pad
          // with silence so the end of the audio is decoded, then flush the features.
          const padding = Math.round(msg.tailPaddingSeconds * SAMPLE_RATE);
          if (padding > 0) s.stream.acceptWaveform({ samples: new Float32Array(padding), sampleRate: SAMPLE_RATE });
          s.stream.inputFinished();
          s.finished = true;
          schedule();
          return;
        }
        case 'close': {
          streams.delete(msg.sid);
          return;
        }
      }
    },
  };
});
