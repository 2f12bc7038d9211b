import { parentPort } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import { ortSessionOptions } from '../../runtimes/onnx/session.js';
import { VAD_CONTEXT, VAD_SAMPLE_RATE, VAD_STATE_DIMS, VAD_WINDOW } from './silero-vad.js';

/**
 * Entry of the Silero VAD worker (driven by SileroVad in silero-vad.ts): it
 * owns the ORT session and runs the recurrent loop itself, so a message
 * carries many 512-sample windows and the state and 64-sample context of
 * every stream stay here, never crossing threads. Messages are served one at
 * a time in arrival order (a stream's chunks must run in order).
 */

type Request =
  | { id: number; type: 'create'; path: string; threads: number }
  | { id: number; type: 'run'; stream: string; fresh: boolean; samples: Float32Array }
  | { id: number; type: 'release' };

interface StreamState {
  state: ort.Tensor;
  /** The last VAD_CONTEXT samples of the stream's previous window. */
  context: Float32Array;
}

const port = parentPort!;
let session: ort.InferenceSession | undefined;
const streams = new Map<string, StreamState>();
// The loop mutates these between runs; ORT only reads them during one.
const input = new Float32Array(VAD_CONTEXT + VAD_WINDOW);
const inputTensor = new ort.Tensor('float32', input, [1, VAD_CONTEXT + VAD_WINDOW]);
const srTensor = new ort.Tensor('int64', BigInt64Array.of(BigInt(VAD_SAMPLE_RATE)), []);

function ready(): ort.InferenceSession {
  if (!session) throw new Error('the Silero VAD session is not loaded');
  return session;
}

/** Speech probability of each whole window of `samples` (a multiple of VAD_WINDOW long), carrying the stream's state on. */
async function run(stream: string, fresh: boolean, samples: Float32Array): Promise<Float32Array> {
  const model = ready();
  if (samples.length % VAD_WINDOW !== 0) throw new Error(`VAD chunks are whole ${VAD_WINDOW}-sample windows, got ${samples.length} samples`);
  let s = streams.get(stream);
  if (fresh || !s) {
    if (!fresh) throw new Error(`the VAD stream ${stream} lost its state (an earlier chunk failed)`);
    const zero = new Float32Array(VAD_STATE_DIMS.reduce((a: number, b) => a * b, 1));
    s = { state: new ort.Tensor('float32', zero, [...VAD_STATE_DIMS]), context: new Float32Array(VAD_CONTEXT) };
    streams.set(stream, s);
  }
  const windows = samples.length / VAD_WINDOW;
  const out = new Float32Array(windows);
  input.set(s.context);
  try {
    for (let w = 0; w < windows; w++) {
      input.set(samples.subarray(w * VAD_WINDOW, (w + 1) * VAD_WINDOW), VAD_CONTEXT);
      const results = await model.run({ input: inputTensor, state: s.state, sr: srTensor });
      out[w] = (results.output!.data as Float32Array)[0]!;
      s.state = results.stateN!;
      // The next window's context: this window's last samples.
      input.copyWithin(0, VAD_WINDOW);
    }
  } catch (error) {
    streams.delete(stream);
    throw error;
  }
  s.context.set(input.subarray(0, VAD_CONTEXT));
  return out;
}

async function handle(message: Request): Promise<void> {
  const { id } = message;
  try {
    if (message.type === 'create') {
      session = await ort.InferenceSession.create(message.path, ortSessionOptions({ threads: message.threads }));
      port.postMessage({ id, ok: true, result: { inputNames: [...session.inputNames], outputNames: [...session.outputNames] } });
    } else if (message.type === 'run') {
      const probabilities = await run(message.stream, message.fresh, message.samples);
      port.postMessage({ id, ok: true, result: probabilities }, [probabilities.buffer as ArrayBuffer]);
    } else if (message.type === 'release') {
      streams.clear();
      await session?.release();
      session = undefined;
      port.postMessage({ id, ok: true });
    }
  } catch (error) {
    port.postMessage({ id, ok: false, error: error instanceof Error ? error.message : String(error) });
  }
}

let queue = Promise.resolve();
port.on('message', (message: Request) => {
  queue = queue.then(() => handle(message));
});
