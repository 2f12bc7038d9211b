import { closeSync, existsSync, mkdirSync, openSync, renameSync, writeSync } from 'node:fs';
import path from 'node:path';
import { melFilters, WHISPER_MEL } from '../../src/audio/mel.js';
import { toHalf } from '../../src/runtimes/onnx/float16.js';
import { seededRandom } from '../../test/fixtures/gguf/format.js';
import { WHISPER_VOCAB_SIZE, type WhisperShape } from '../../test/fixtures/onnx/whisper.js';

/**
 * A random-weight Whisper model in whisper.cpp's legacy GGML format (what
 * `ggml-base.bin` is), for the whisper.cpp anchor. Layout, as
 * `whisper_model_load` in whisper.cpp's src/whisper.cpp reads it (checked in
 * the copy @fugood/whisper.node ships, node_modules/@fugood/whisper.node/whisper.cpp):
 *
 *   u32 magic 0x67676d6c ("ggml")
 *   i32 × 11 hparams: n_vocab, n_audio_ctx, n_audio_state, n_audio_head,
 *       n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer,
 *       n_mels, ftype (0 = all F32, 1 = F16 matrices)
 *   mel filters: i32 n_mel, i32 n_fft, then n_mel × n_fft f32
 *   vocab: i32 count, then per token u32 length + bytes (the text tokens;
 *       whisper.cpp names the special and timestamp tokens itself)
 *   tensors until EOF: i32 n_dims, i32 name length, i32 ttype, i32 ne[n_dims]
 *       (ggml order: ne[0] is the fastest axis), the name, the data (no padding)
 *
 * Matrices (attention, MLP, token embedding) are `ftype`'s type, the two
 * conv kernels F16 unless ftype is F32, everything else F32 — the types
 * whisper_model_load allocates; it refuses a tensor whose byte size differs.
 * Q8_0 rows (ne[0] values, a multiple of 32) are blocks of { f16 d; i8 q[32] }
 * with d = max |x| / 127.
 *
 * Text tokens are the one byte "a", except 220, which is " " as in GPT-2's
 * vocabulary (whisper.cpp looks " " up to suppress a blank first token).
 * whisper-cli's timings count the decoded tokens (decode runs).
 */

export const GGML_TEXT_TOKENS = 50257;
/** " " in GPT-2's (and Whisper's) vocabulary. */
const BLANK_TOKEN = 220;

/**
 * Matrix types: f16 (what ggml-base.bin is), q8_0 (whisper.cpp's 8-bit: blocks
 * of 32 int8 with an f16 scale, as `quantize` writes ggml-base-q8_0.bin), f32.
 * f32 loads but whisper.cpp 1.9.1's CPU backend aborts in its first conv
 * (GGML_ASSERT(src0->type == GGML_TYPE_F16) in ggml-cpu/ops.cpp's im2col_f16).
 */
export type GgmlType = 'f32' | 'f16' | 'q8_0';

const TYPE_ID: Record<GgmlType, number> = { f32: 0, f16: 1, q8_0: 8 };
const FTYPE: Record<GgmlType, number> = { f32: 0, f16: 1, q8_0: 7 };

interface TensorSpec {
  name: string;
  /** ggml order. */
  ne: number[];
  type: GgmlType;
  init: { kind: 'uniform'; scale: number } | { kind: 'fill'; value: number } | { kind: 'sinusoids' };
}

function tensors(shape: WhisperShape, wtype: GgmlType): TensorSpec[] {
  const n = shape.dModel;
  const vtype: GgmlType = wtype === 'f32' ? 'f32' : 'f16'; // the conv kernels
  const out: TensorSpec[] = [];
  const matrix = (name: string, inputs: number, outputs: number) => out.push({ name, ne: [inputs, outputs], type: wtype, init: { kind: 'uniform', scale: 1 / Math.sqrt(inputs) } });
  const bias = (name: string, size: number) => out.push({ name, ne: [size], type: 'f32', init: { kind: 'uniform', scale: 0.02 } });
  const norm = (prefix: string) => {
    out.push({ name: `${prefix}.weight`, ne: [n], type: 'f32', init: { kind: 'fill', value: 1 } });
    out.push({ name: `${prefix}.bias`, ne: [n], type: 'f32', init: { kind: 'fill', value: 0 } });
  };
  const attention = (prefix: string) => {
    matrix(`${prefix}.query.weight`, n, n);
    bias(`${prefix}.query.bias`, n);
    matrix(`${prefix}.key.weight`, n, n);
    matrix(`${prefix}.value.weight`, n, n);
    bias(`${prefix}.value.bias`, n);
    matrix(`${prefix}.out.weight`, n, n);
    bias(`${prefix}.out.bias`, n);
  };
  const mlp = (prefix: string) => {
    norm(`${prefix}.mlp_ln`);
    matrix(`${prefix}.mlp.0.weight`, n, shape.ffn);
    bias(`${prefix}.mlp.0.bias`, shape.ffn);
    matrix(`${prefix}.mlp.2.weight`, shape.ffn, n);
    bias(`${prefix}.mlp.2.bias`, n);
  };
  const audioCtx = shape.frames / 2;
  out.push({ name: 'encoder.positional_embedding', ne: [n, audioCtx], type: 'f32', init: { kind: 'sinusoids' } });
  out.push({ name: 'encoder.conv1.weight', ne: [3, shape.numMelBins, n], type: vtype, init: { kind: 'uniform', scale: 1 / Math.sqrt(shape.numMelBins * 3) } });
  out.push({ name: 'encoder.conv1.bias', ne: [1, n], type: 'f32', init: { kind: 'uniform', scale: 0.02 } });
  out.push({ name: 'encoder.conv2.weight', ne: [3, n, n], type: vtype, init: { kind: 'uniform', scale: 1 / Math.sqrt(n * 3) } });
  out.push({ name: 'encoder.conv2.bias', ne: [1, n], type: 'f32', init: { kind: 'uniform', scale: 0.02 } });
  norm('encoder.ln_post');
  for (let i = 0; i < shape.encoderLayers; i++) {
    const p = `encoder.blocks.${i}`;
    mlp(p);
    norm(`${p}.attn_ln`);
    attention(`${p}.attn`);
  }
  out.push({ name: 'decoder.positional_embedding', ne: [n, shape.maxTargetPositions], type: 'f32', init: { kind: 'uniform', scale: 0.5 } });
  out.push({ name: 'decoder.token_embedding.weight', ne: [n, WHISPER_VOCAB_SIZE], type: wtype, init: { kind: 'uniform', scale: 1 } });
  norm('decoder.ln');
  for (let i = 0; i < shape.decoderLayers; i++) {
    const p = `decoder.blocks.${i}`;
    mlp(p);
    norm(`${p}.attn_ln`);
    attention(`${p}.attn`);
    norm(`${p}.cross_attn_ln`);
    attention(`${p}.cross_attn`);
  }
  return out;
}

/** ggml's Q8_0: per 32 values, an f16 scale then 32 int8. */
export function toQ8_0(values: Float32Array): Uint8Array {
  if (values.length % 32) throw new Error('Q8_0 needs a multiple of 32 values');
  const out = new Uint8Array((values.length / 32) * 34);
  const view = new DataView(out.buffer);
  for (let b = 0; b < values.length / 32; b++) {
    let max = 0;
    for (let i = 0; i < 32; i++) max = Math.max(max, Math.abs(values[b * 32 + i]!));
    const d = max / 127;
    view.setUint16(b * 34, toHalf(d), true);
    const inv = d ? 1 / d : 0;
    for (let i = 0; i < 32; i++) view.setInt8(b * 34 + 2 + i, Math.round(values[b * 32 + i]! * inv));
  }
  return out;
}

/** Writes the GGML file (unless it is there already: generation is deterministic); returns its path. */
export function writeWhisperGgml(file: string, shape: WhisperShape, wtype: GgmlType = 'f16', seed = 5): string {
  if (existsSync(file)) return file;
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  const fd = openSync(tmp, 'w');
  const write = (bytes: Uint8Array) => {
    let done = 0;
    while (done < bytes.length) done += writeSync(fd, bytes, done);
  };
  const ints = (...values: number[]) => write(new Uint8Array(Int32Array.from(values).buffer));
  try {
    ints(0x67676d6c);
    ints(WHISPER_VOCAB_SIZE, shape.frames / 2, shape.dModel, shape.heads, shape.encoderLayers, shape.maxTargetPositions, shape.dModel, shape.heads, shape.decoderLayers, shape.numMelBins, FTYPE[wtype]);
    // Mel filters, dense [n_mel][n_fft / 2 + 1], from lserve's own Slaney filters.
    const bins = WHISPER_MEL.nFft / 2 + 1;
    const dense = new Float32Array(shape.numMelBins * bins);
    melFilters({ ...WHISPER_MEL, nMels: shape.numMelBins }).forEach((band, m) => band.weights.forEach((w, k) => (dense[m * bins + band.first + k] = w)));
    ints(shape.numMelBins, bins);
    write(new Uint8Array(dense.buffer));
    ints(GGML_TEXT_TOKENS);
    const vocab = new Uint8Array(5 * GGML_TEXT_TOKENS);
    // Length 1, then "a" (or " ").
    for (let i = 0; i < GGML_TEXT_TOKENS; i++) vocab.set([1, 0, 0, 0, i === BLANK_TOKEN ? 0x20 : 0x61], i * 5);
    write(vocab);
    const random = seededRandom(seed);
    for (const t of tensors(shape, wtype)) {
      const name = Buffer.from(t.name, 'utf8');
      ints(t.ne.length, name.length, TYPE_ID[t.type], ...t.ne);
      write(name);
      const count = t.ne.reduce((a, b) => a * b, 1);
      const values = new Float32Array(count);
      if (t.init.kind === 'fill') values.fill(t.init.value);
      else if (t.init.kind === 'uniform') for (let i = 0; i < count; i++) values[i] = (random() * 2 - 1) * t.init.scale;
      else {
        // [ctx][state] = sin | cos, as openai/whisper's sinusoids().
        const [channels, length] = t.ne as [number, number];
        const half = channels / 2;
        const step = Math.log(10000) / (half - 1);
        for (let p = 0; p < length; p++) {
          for (let i = 0; i < half; i++) {
            values[p * channels + i] = Math.sin(p * Math.exp(-step * i));
            values[p * channels + half + i] = Math.cos(p * Math.exp(-step * i));
          }
        }
      }
      if (t.type === 'f32') write(new Uint8Array(values.buffer));
      else if (t.type === 'f16') write(new Uint8Array(Uint16Array.from(values, toHalf).buffer));
      else write(toQ8_0(values));
    }
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  return file;
}
