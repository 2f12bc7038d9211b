import { parentPort } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import { VIEWS, type Described, type RunResult, type SessionRequest, type Shape, type TensorType, type WireTensor } from './tensor-wire.js';

/**
 * The worker thread of one OnnxSession (session.ts; started through
 * runtimes/launch): it only loads ONNX Runtime, creates the session, runs it
 * and posts results back, tensors crossing by transfer. Requests are handled
 * as they come; the session serialises its runs.
 */

type Request = SessionRequest & { id: number };

const port = parentPort!;
let session: ort.InferenceSession | undefined;
/** Outputs and inputs kept for later runs, by the name the caller gave them. */
const kept = new Map<string, ort.Tensor>();

const shapes = (meta: readonly ort.InferenceSession.ValueMetadata[]): Shape[] => meta.map((m) => (m?.isTensor ? Array.from(m.shape) : []));
const types = (meta: readonly ort.InferenceSession.ValueMetadata[]): string[] => meta.map((m) => (m?.isTensor ? String(m.type) : ''));

function toTensor(t: WireTensor): ort.Tensor {
  return new ort.Tensor(t.type, new VIEWS[t.type](t.buffer, t.byteOffset, t.length), t.dims);
}

type View = InstanceType<(typeof VIEWS)[TensorType]>;

/** The positions `rows` of a `[1, sequence, …]` tensor whose positions hold `size` elements each. */
function pickRows(type: TensorType, source: View, rows: readonly number[], size: number): View {
  // Both sides have the tensor's element type; Float32Array stands for it here.
  const from = source as Float32Array;
  const picked = new VIEWS[type](rows.length * size) as Float32Array<ArrayBuffer>;
  rows.forEach((row, i) => picked.set(from.subarray(row * size, (row + 1) * size), i * size));
  return picked;
}

function ready(): ort.InferenceSession {
  if (!session) throw new Error('the session is not created');
  return session;
}

async function create(source: string | Uint8Array, options: ort.InferenceSession.SessionOptions): Promise<Described> {
  session = typeof source === 'string' ? await ort.InferenceSession.create(source, options) : await ort.InferenceSession.create(source, options);
  return {
    inputNames: [...session.inputNames],
    outputNames: [...session.outputNames],
    inputShapes: shapes(session.inputMetadata),
    outputShapes: shapes(session.outputMetadata),
    inputTypes: types(session.inputMetadata),
    outputTypes: types(session.outputMetadata),
  };
}

async function run(request: Extract<SessionRequest, { type: 'run' }>): Promise<{ result: RunResult; transfer: ArrayBuffer[] }> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const [name, feed] of Object.entries(request.feeds)) {
    if (!('kept' in feed)) feeds[name] = toTensor(feed);
    else if (kept.has(feed.kept)) feeds[name] = kept.get(feed.kept)!;
    else throw new Error(`no kept tensor named ${feed.kept}`);
  }
  const results = await ready().run(feeds);
  for (const [output, name] of Object.entries(request.keep)) kept.set(name, results[output]!);
  for (const [input, name] of Object.entries(request.keepInputs)) kept.set(name, feeds[input]!);
  const outputs: Record<string, WireTensor> = {};
  const transfer: ArrayBuffer[] = [];
  for (const name of request.fetch) {
    const out = results[name];
    if (!out) throw new Error(`the model has no output named ${name}`);
    const type = out.type as TensorType;
    const source = out.data as View;
    const dims = Array.from(out.dims);
    let data: View;
    const rows = request.rows[name];
    if (rows) {
      data = pickRows(type, source, rows, dims.slice(2).reduce((a, b) => a * b, 1));
      dims[1] = rows.length;
    } else {
      // A kept output may be fed again: send a copy, keep the original.
      data = request.keep[name] === undefined ? source : source.slice();
    }
    const buffer = data.buffer as ArrayBuffer;
    outputs[name] = { type, buffer, byteOffset: data.byteOffset, length: data.length, dims };
    if (!transfer.includes(buffer)) transfer.push(buffer);
  }
  return { result: { outputs }, transfer };
}

port.on('message', async (request: Request) => {
  const { id } = request;
  try {
    switch (request.type) {
      case 'create':
        port.postMessage({ id, ok: true, result: await create(request.model ?? request.path, request.options as ort.InferenceSession.SessionOptions) });
        return;
      case 'run': {
        const { result, transfer } = await run(request);
        port.postMessage({ id, ok: true, result }, transfer);
        return;
      }
      case 'drop':
        for (const name of [...kept.keys()]) if (name.startsWith(request.prefix)) kept.delete(name);
        port.postMessage({ id, ok: true });
        return;
      case 'release':
        kept.clear();
        await ready().release();
        port.postMessage({ id, ok: true });
        return;
    }
  } catch (error) {
    port.postMessage({ id, ok: false, error: error instanceof Error && error.message ? error.message : String(error) });
  }
});
