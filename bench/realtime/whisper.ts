import { existsSync, readFileSync } from 'node:fs';
import { copyFile, link, mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { DataType, floats, int64s, intAttr, node, onnx } from '../../test/fixtures/onnx/build.js';
import { WHISPER_FILES, WHISPER_TOKENS, WHISPER_VOCAB_SIZE } from '../../test/fixtures/onnx/whisper.js';
import { benchWhisperOnnx } from '../asr/models.js';

/**
 * The realtime benchmark's Whisper: whisper-base's real size (the speech
 * benchmark's synthetic export, bench/asr/models.ts) with a bias added to
 * the decoder's logits, chosen by the token it is given, so that greedy
 * decoding says "<|0.00|> Hello world." and ends: a window costs what a
 * real one costs to encode (the whole 30 s window, whatever the clip's
 * length) and the decoder steps of a short turn's transcript, and the chat
 * model hears a user message, as it would. A random model would instead
 * write 224 tokens a window and, its text being improbable, try again at
 * five higher temperatures: seconds that measure the random weights, not a
 * turn.
 */

// Above what the random weights give any token (the input token itself scores ≈ 200: tied embeddings).
const BIAS = 1000;
export const BENCH_TRANSCRIPT = 'Hello world.';

/** The model folder `source` (default: the fp32 export) with its decoder so biased, beside it. */
export async function benchWhisperSaysHelloWorld(source?: string): Promise<string> {
  source ??= await benchWhisperOnnx();
  const target = `${source}-hello-world`;
  if (Object.values(WHISPER_FILES).every((f) => existsSync(path.join(target, f)))) return target;
  await mkdir(path.join(target, 'onnx'), { recursive: true });
  for (const file of Object.values(WHISPER_FILES)) {
    const to = path.join(target, file);
    // The store refuses symlinks that lead out of a registered folder: hard links, copies where links fail.
    if (file !== WHISPER_FILES.decoder && !existsSync(to)) await link(path.join(source, file), to).catch(() => copyFile(path.join(source, file), to));
  }
  const vocab = (JSON.parse(readFileSync(path.join(source, 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number> } }).model.vocab;
  const id = (piece: string) => vocab[piece] ?? fail(`no token '${piece}' in the tokenizer`);
  const decoder = path.join(target, WHISPER_FILES.decoder);
  await writeFile(`${decoder}.tmp`, biasedDecoder(readFileSync(path.join(source, WHISPER_FILES.decoder)), [id('ĠHello'), id('Ġworld'), id('.')]));
  await rename(`${decoder}.tmp`, decoder);
  return target;
}

function fail(message: string): never {
  throw new Error(message);
}

/**
 * The merged decoder with `logits + bias[row]` in both branches of its If,
 * the row picked per position by the input token: after `<|0.00|>` the
 * first word, after each word the next, after the last `<|endoftext|>`;
 * after any other token (the prompt's last) `<|0.00|>` or, where
 * timestamps are off, the first word.
 */
function biasedDecoder(bytes: Uint8Array, words: readonly number[]): Uint8Array {
  const model = onnx.ModelProto.decode(bytes);
  const main = model.graph!;
  const chain = [WHISPER_TOKENS.firstTimestamp, ...words, WHISPER_TOKENS.endOfText];
  const rows = new Float32Array(chain.length * WHISPER_VOCAB_SIZE);
  // Row 0: after any token not in the chain.
  rows[WHISPER_TOKENS.firstTimestamp] = BIAS;
  rows[words[0]!] = BIAS;
  // Row k: after chain[k - 1], its successor.
  for (let k = 1; k < chain.length; k++) rows[k * WHISPER_VOCAB_SIZE + chain[k]!] = BIAS;
  main.initializer!.push(floats('bench_bias_rows', [chain.length, WHISPER_VOCAB_SIZE], rows));
  const terms: string[] = [];
  for (let k = 1; k < chain.length; k++) {
    main.initializer!.push(int64s(`bench_after_${k}`, [], [chain[k - 1]!]), int64s(`bench_row_${k}`, [], [k]));
    main.node!.push(
      node('Equal', ['input_ids', `bench_after_${k}`], [`bench_is_${k}`]),
      node('Cast', [`bench_is_${k}`], [`bench_is_${k}_int`], [intAttr('to', DataType.INT64)]),
      node('Mul', [`bench_is_${k}_int`, `bench_row_${k}`], [`bench_term_${k}`]),
    );
    terms.push(`bench_term_${k}`);
  }
  // Sum takes no integers: the terms are added in turn (at most one is non-zero).
  let row = terms[0]!;
  for (const [i, term] of terms.slice(1).entries()) {
    main.node!.push(node('Add', [row, term], [`bench_sum_${i}`]));
    row = `bench_sum_${i}`;
  }
  main.node!.push(node('Identity', [row], ['bench_row']), node('Gather', ['bench_bias_rows', 'bench_row'], ['bench_bias'], [intAttr('axis', 0)]));
  const branches = (main.node ?? []).filter((n) => n.opType === 'If').flatMap((n) => (n.attribute ?? []).map((a) => a.g).filter((g) => g != null));
  if (branches.length !== 2) throw new Error(`expected the merged decoder's two If branches, found ${branches.length}`);
  for (const branch of branches) {
    const logits = branch.output![0]!.name!;
    const producer = branch.node!.find((n) => n.output?.includes(logits));
    if (!producer) throw new Error(`no node writes ${logits}`);
    producer.output = producer.output!.map((o) => (o === logits ? `${logits}_unbiased` : o));
    branch.node!.push(node('Add', [`${logits}_unbiased`, 'bench_bias'], [logits]));
  }
  return onnx.ModelProto.encode(model).finish();
}
