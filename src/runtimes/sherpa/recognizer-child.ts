import { childSource } from './child.js';

/**
 * The streaming recognizer's child process (see child.ts for how it runs,
 * supervisor.ts for the server's side): OnlineRecognizers by model key,
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
export const RECOGNIZER_CHILD_SOURCE = childSource(String.raw`
const MAX_BATCH = 4;
const recognizers = new Map(); // key -> OnlineRecognizer
const streams = new Map(); // sid -> stream state
let scheduled = false;
let turn = 0;

function failed(msg, error) {
  if (msg && typeof msg.sid === 'number') fail(msg.sid, error);
  else throw error;
}

function handle(msg) {
  switch (msg.t) {
    case 'load': {
      try {
        recognizers.set(msg.key, new sherpa.OnlineRecognizer(msg.config));
        send({ t: 'loaded', key: msg.key, ok: true });
      } catch (error) {
        send({ t: 'loaded', key: msg.key, ok: false, error: messageOf(error) });
      }
      return;
    }
    case 'unload': {
      for (const [sid, s] of streams) if (s.key === msg.key) streams.delete(sid);
      recognizers.delete(msg.key);
      if (typeof global.gc === 'function') setImmediate(() => global.gc());
      return;
    }
    case 'open': {
      const recognizer = recognizers.get(msg.key);
      if (!recognizer) {
        send({ t: 'error', sid: msg.sid, error: 'the model is not loaded in the recognizer process' });
        return;
      }
      streams.set(msg.sid, {
        sid: msg.sid, key: msg.key, recognizer, stream: recognizer.createStream(),
        text: '', segment: 0, finished: false, accepted: 0, acknowledged: 0, lastTurn: 0,
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
      const padding = Math.round(msg.tailPaddingSeconds * 16000);
      if (padding > 0) s.stream.acceptWaveform({ samples: new Float32Array(padding), sampleRate: 16000 });
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
}

function fail(sid, error) {
  streams.delete(sid);
  send({ t: 'error', sid, error: messageOf(error) });
}

function schedule() {
  if (scheduled) return;
  scheduled = true;
  setImmediate(pump);
}

function pump() {
  scheduled = false;
  turn++;
  const ready = new Map(); // recognizer -> streams ready to decode
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
      if (batch.length === 1) recognizer.decode(batch[0].stream);
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
function advance(s) {
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
`);
