import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import path from 'node:path';
import { inlineExternalData } from './inline-external.js';
import { PREPARED_ACCURACY_LEVEL } from './prepare-predictor.js';

/**
 * The talker on MatMulNBits' int8-activation kernel: the quantizer leaves
 * accuracy_level unset (fp32 activations: each block is dequantised, then
 * multiplied), which on CPU is a third of the int8 kernel's rate
 * (bench/tts.ts: a cached talker step 1.3–1.5× faster with level 4). ONNX
 * Runtime has no session option that raises it, so the attribute is set in
 * the graph. Graphs without 4-bit layers (fp32, fp16 exports) are left as
 * they are.
 */

const { onnx } = onnxProto;

/** Sets accuracy_level on every MatMulNBits node that asks for less; the number of nodes changed. */
export function useInt8Activations(model: OnnxTypes.IModelProto): number {
  let changed = 0;
  for (const node of model.graph?.node ?? []) {
    if (node.opType !== 'MatMulNBits' || node.domain !== 'com.microsoft') continue;
    const attributes = node.attribute ?? [];
    const level = attributes.find((a) => a.name === 'accuracy_level');
    if (level && Number(level.i) >= PREPARED_ACCURACY_LEVEL) continue;
    node.attribute = [...attributes.filter((a) => a !== level), { name: 'accuracy_level', type: onnx.AttributeProto.AttributeType.INT, i: PREPARED_ACCURACY_LEVEL }];
    changed++;
  }
  return changed;
}

/**
 * The talker graph decoded, with int8 activations set, and the SHA-256 of
 * the published file it was read from; undefined when it has no 4-bit layer
 * to change.
 */
export async function talkerWithInt8Activations(file: string): Promise<{ model: OnnxTypes.ModelProto; source: string } | undefined> {
  const bytes = await readFile(file);
  const model = onnx.ModelProto.decode(bytes);
  if (!useInt8Activations(model)) return undefined;
  await inlineExternalData(model, path.dirname(file));
  return { model, source: createHash('sha256').update(bytes).digest('hex') };
}
