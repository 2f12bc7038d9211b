import { existsSync, readFileSync } from 'node:fs';
import { copyFile, link, mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { floats, node, onnx } from '../../test/fixtures/onnx/build.js';
import { WHISPER_FILES, WHISPER_TOKENS, WHISPER_VOCAB_SIZE } from '../../test/fixtures/onnx/whisper.js';
import { benchWhisperOnnx } from '../asr/models.js';

/**
 * The realtime benchmark's Whisper: whisper-base's real size (the speech
 * benchmark's synthetic export, bench/asr/models.ts) with a bias added to
 * the decoder's logits so that greedy decoding says `<|0.00|>` and then
 * ends: a window costs what a real one costs to encode (the whole 30 s
 * window, whatever the clip's length) and two decoder steps. A random
 * model would instead write 224 tokens a window and, its text being
 * improbable, try again at five higher temperatures: seconds that measure
 * the random weights, not a turn. A real transcript of a short turn takes
 * ≈ 4–6 steps more (the transcript is empty here).
 */

const BIAS = 100;

export async function benchWhisperEndsAtOnce(): Promise<string> {
  const source = await benchWhisperOnnx();
  const target = `${source}-ends-at-once`;
  if (Object.values(WHISPER_FILES).every((f) => existsSync(path.join(target, f)))) return target;
  await mkdir(path.join(target, 'onnx'), { recursive: true });
  for (const file of Object.values(WHISPER_FILES)) {
    const to = path.join(target, file);
    // The store refuses symlinks that lead out of a registered folder: hard links, copies where links fail.
    if (file !== WHISPER_FILES.decoder && !existsSync(to)) await link(path.join(source, file), to).catch(() => copyFile(path.join(source, file), to));
  }
  const decoder = path.join(target, WHISPER_FILES.decoder);
  await writeFile(`${decoder}.tmp`, biasedDecoder(readFileSync(path.join(source, WHISPER_FILES.decoder))));
  await rename(`${decoder}.tmp`, decoder);
  return target;
}

/** The merged decoder with `logits + bias` in both branches of its If (bias: `<|0.00|>` and `<|endoftext|>` +BIAS). */
function biasedDecoder(bytes: Uint8Array): Uint8Array {
  const model = onnx.ModelProto.decode(bytes);
  const main = model.graph!;
  const bias = new Float32Array(WHISPER_VOCAB_SIZE);
  bias[WHISPER_TOKENS.firstTimestamp] = BIAS;
  bias[WHISPER_TOKENS.endOfText] = BIAS;
  main.initializer!.push(floats('realtime_bench_logit_bias', [WHISPER_VOCAB_SIZE], bias));
  const branches = (main.node ?? []).filter((n) => n.opType === 'If').flatMap((n) => (n.attribute ?? []).map((a) => a.g).filter((g) => g != null));
  if (branches.length !== 2) throw new Error(`expected the merged decoder's two If branches, found ${branches.length}`);
  for (const branch of branches) {
    const logits = branch.output![0]!.name!;
    const producer = branch.node!.find((n) => n.output?.includes(logits));
    if (!producer) throw new Error(`no node writes ${logits}`);
    producer.output = producer.output!.map((o) => (o === logits ? `${logits}_unbiased` : o));
    branch.node!.push(node('Add', [`${logits}_unbiased`, 'realtime_bench_logit_bias'], [logits]));
  }
  return onnx.ModelProto.encode(model).finish();
}
