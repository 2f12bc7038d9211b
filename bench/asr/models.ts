import { existsSync } from 'node:fs';
import { copyFile, link, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { WHISPER_BASE, WHISPER_FILES, writeWhisperModel } from '../../test/fixtures/onnx/whisper.js';
import { CACHE } from './common.js';
import { writeWhisperGgml, type GgmlType } from './ggml.js';
import { writeQuantized } from './quantize.js';
import { REAL_ZIPFORMER, writeBenchZipformer } from './zipformer.js';

/**
 * The speech benchmark's synthetic models, generated once into bench/.cache:
 * whisper-base's real dimensions as the onnx-community export lserve loads
 * (fp32, as the catalog's whisper-base files: ≈ 290 MB; the test fixture's
 * writer), the same with an int8 decoder (≈ 160 MB) and with an int8 encoder
 * and decoder (as whisper-base-q8), as whisper.cpp GGML
 * files (F16 matrices as ggml-base.bin, ≈ 148 MB; Q8_0, ≈ 80 MB), and a
 * streaming Zipformer2 with the interface, state sizes and (approximately)
 * the per-chunk compute of sherpa-onnx-streaming-zipformer-en-2023-06-26
 * (≈ 70 MB).
 */

export function benchWhisperOnnx(): Promise<string> {
  return writeWhisperModel(path.join(CACHE, 'whisper-base-synthetic'), WHISPER_BASE);
}

/**
 * The same model folder with the MatMuls of `quantize` (bench/asr/quantize.ts) in int8: the decoder alone,
 * or encoder and decoder as the catalog's `-q8` entries (the exports' `*_quantized.onnx`). The other files
 * are hard links (the store refuses symlinks that lead out of a registered folder), copies where links fail.
 */
async function benchWhisperOnnxQuantized(suffix: string, quantize: readonly ('encoder' | 'decoder')[]): Promise<string> {
  const source = await benchWhisperOnnx();
  const target = `${source}-${suffix}`;
  if (Object.values(WHISPER_FILES).every((f) => existsSync(path.join(target, f)))) return target;
  await mkdir(path.join(target, 'onnx'), { recursive: true });
  const quantized = new Set<string>(quantize.map((role) => WHISPER_FILES[role]));
  for (const file of Object.values(WHISPER_FILES)) {
    const to = path.join(target, file);
    if (!quantized.has(file) && !existsSync(to)) await link(path.join(source, file), to).catch(() => copyFile(path.join(source, file), to));
  }
  for (const file of quantized) writeQuantized(path.join(source, file), path.join(target, file));
  return target;
}

export function benchWhisperOnnxInt8Decoder(): Promise<string> {
  return benchWhisperOnnxQuantized('int8-decoder', ['decoder']);
}

export function benchWhisperOnnxQ8(): Promise<string> {
  return benchWhisperOnnxQuantized('q8', ['encoder', 'decoder']);
}

export function benchWhisperGgml(type: GgmlType): string {
  return writeWhisperGgml(path.join(CACHE, `whisper-base-synthetic-${type}.ggml.bin`), WHISPER_BASE, type);
}

export function benchZipformer(): Promise<string> {
  return writeBenchZipformer(path.join(CACHE, 'zipformer-en-2023-06-26-synthetic'), REAL_ZIPFORMER);
}
