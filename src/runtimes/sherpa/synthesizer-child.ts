import { childSource } from './child.js';

/**
 * The speech synthesizer's child process (see child.ts for how it runs, tts.ts
 * for the server's side): sherpa-onnx OfflineTts models by key, syntheses by id.
 *
 * Models load with OfflineTts.createAsync and synthesise with generateAsync:
 * both run on libuv's thread pool, so this process's event loop stays free
 * for `abort` messages and for the blocks of other models' syntheses. With
 * maxNumSentences 1, sherpa-onnx generates one sentence at a time and calls
 * onProgress with each; the block is sent on at once. Returning 0 from
 * onProgress is sherpa-onnx's cancellation: its generator checks the answer
 * before the next sentence, so an `abort` stops a synthesis at the next
 * sentence boundary (a sentence being synthesised runs to its end).
 *
 * Requests for one model run one at a time, in arrival order (a synthesis
 * already uses every thread the model was given); different models run side
 * by side.
 */
export const SYNTHESIZER_CHILD_SOURCE = childSource(String.raw`
const models = new Map(); // key -> { ready: Promise<OfflineTts>, config, tail: Promise }
const jobs = new Map(); // id -> { aborted }

function failed(msg, error) {
  if (!msg || typeof msg.id !== 'number') throw error;
  jobs.delete(msg.id);
  send({ t: 'error', id: msg.id, error: messageOf(error) });
}

function handle(msg) {
  switch (msg.t) {
    case 'load': {
      const model = { ready: sherpa.OfflineTts.createAsync(msg.config), config: msg.config, tail: Promise.resolve() };
      models.set(msg.key, model);
      model.ready.then(
        (tts) => send({ t: 'loaded', key: msg.key, ok: true, info: { sampleRate: tts.sampleRate, numSpeakers: tts.numSpeakers } }),
        (error) => {
          if (models.get(msg.key) === model) models.delete(msg.key);
          send({ t: 'loaded', key: msg.key, ok: false, error: messageOf(error) });
        },
      );
      return;
    }
    case 'unload': {
      models.delete(msg.key);
      if (typeof global.gc === 'function') setImmediate(() => global.gc());
      return;
    }
    case 'synth': {
      const model = models.get(msg.key);
      if (!model) {
        send({ t: 'error', id: msg.id, error: 'the model is not loaded in the synthesizer process' });
        return;
      }
      const job = { aborted: false };
      jobs.set(msg.id, job);
      model.tail = model.tail.then(() => run(model, msg, job));
      return;
    }
    case 'abort': {
      const job = jobs.get(msg.id);
      if (job) job.aborted = true;
      jobs.delete(msg.id);
      return;
    }
  }
}

async function run(model, msg, job) {
  try {
    if (job.aborted) return;
    const tts = await model.ready;
    if (job.aborted) return;
    await tts.generateAsync({
      text: msg.text,
      generationConfig: { sid: msg.sid, speed: msg.speed, silenceScale: model.config.silenceScale },
      onProgress: ({ samples }) => {
        if (job.aborted) return 0;
        if (samples.length > 0) send({ t: 'audio', id: msg.id, samples });
        return 1;
      },
    });
    if (!job.aborted) send({ t: 'done', id: msg.id });
  } catch (error) {
    if (job.aborted) return;
    // Text without a single pronounceable token (e.g. only punctuation) makes
    // sherpa-onnx produce nothing and reject with this message: that is silence, not a failure.
    if (messageOf(error) === 'TTS generation produced no audio') send({ t: 'done', id: msg.id });
    else send({ t: 'error', id: msg.id, error: messageOf(error) });
  } finally {
    jobs.delete(msg.id);
  }
}
`);
