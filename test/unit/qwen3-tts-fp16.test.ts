import path from 'node:path';
import { readFile } from 'node:fs/promises';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InstalledModel } from '../../src/core/store.js';
import { qwen3TtsLoader } from '../../src/families/qwen3-tts/loader.js';
import { bindPredictor } from '../../src/families/qwen3-tts/code-predictor.js';
import { parseTtsConfig, type TtsConfig } from '../../src/families/qwen3-tts/config.js';
import { FrameGenerator, type GenerateRequest, type GraphPaths } from '../../src/families/qwen3-tts/generator.js';
import type { GraphValue } from '../../src/families/qwen3-tts/graph-io.js';
import { bindTalker, pairCache } from '../../src/families/qwen3-tts/talker.js';
import { readFloats, toFloatType } from '../../src/runtimes/onnx/float-io.js';
import {
  FP16_PREDICTOR_OUTPUTS,
  FP16_TALKER_OUTPUTS,
  TINY_QWEN3_TTS,
  qwen3TtsConfig,
  qwen3TtsFiles,
  qwen3TtsGenerationConfig,
  talkerPastName,
  talkerPresentName,
  tinyQwen3TtsModel,
} from '../fixtures/onnx/qwen3-tts.js';

/**
 * int4 / fp16 exports of the talker and code predictor: inputs and outputs
 * bound by role (graph-io.ts), fp16 converted at the boundary. The fixture's
 * fp16 variant (test/fixtures/onnx/qwen3-tts/fp16-io.ts) declares float16
 * inputs, outputs and KV cache and renames outputs (`logits_Q4`,
 * `last_hidden_state`) around the fp32 fixture's own computation, so it must
 * give the fp32 fixture's logits within fp16 rounding and its codes.
 */

const H = TINY_QWEN3_TTS.talker.hidden;
const { layers, kvHeads, headDim } = TINY_QWEN3_TTS.talker;

const value = (name: string, type: string, shape: Array<number | string>): GraphValue => ({ name, type, shape });
const kv = (name: string, type = 'float32') => value(name, type, [1, kvHeads, 'past', headDim]);

function talkerValues(type: string, outputs: GraphValue[]): { inputs: GraphValue[]; outputs: GraphValue[] } {
  const inputs = [value('inputs_embeds', type, [1, 'T', H]), value('position_ids', 'int64', [3, 1, 'T']), value('attention_mask', 'int64', [1, 'total'])];
  for (let l = 0; l < layers; l++) for (const part of ['key', 'value'] as const) inputs.push(kv(talkerPastName(l, part), type));
  const presents = [];
  for (let l = 0; l < layers; l++) for (const part of ['key', 'value'] as const) presents.push(kv(talkerPresentName(l, part), type));
  return { inputs, outputs: [...outputs, ...presents] };
}

describe('Qwen3-TTS graph values bound by role', () => {
  const dims = { vocab: 3072, hidden: H };

  it('binds the fp32 export by name, and an fp16 export by name prefix and by shape', () => {
    const fp32 = talkerValues('float32', [value('logits', 'float32', [1, 'T', 3072]), value('hidden_states', 'float32', [1, 'T', H])]);
    const bound = bindTalker(fp32.inputs, fp32.outputs, dims);
    expect(bound).toMatchObject({ embeds: 'inputs_embeds', positions: 'position_ids', mask: 'attention_mask', logits: 'logits', hidden: 'hidden_states' });
    expect(bound.types).toEqual({ embeds: 'float32', cache: 'float32', logits: 'float32', hidden: 'float32' });
    expect(bound.cache).toHaveLength(2 * layers);
    expect(bound.cache[1]).toEqual({ past: talkerPastName(0, 'value'), present: talkerPresentName(0, 'value') });
    expect(bound.sizes).toEqual({ hidden: H, kvHeads, headDim });

    // Renamed, reordered and fp16: `logits_Q4` by its prefix, the hidden states by their width.
    const fp16 = talkerValues('float16', [value('last_hidden_state', 'float16', [1, 'T', H]), value('logits_Q4', 'float16', [1, 'T', 3072])]);
    expect(bindTalker(fp16.inputs, fp16.outputs, dims)).toMatchObject({ logits: 'logits_Q4', hidden: 'last_hidden_state', types: { embeds: 'float16', cache: 'float16', logits: 'float16', hidden: 'float16' } });
    // Names that say nothing: by the vocabulary's and the hidden width's sizes.
    const anonymous = talkerValues('float32', [value('output_1', 'float32', [1, 'T', H]), value('output_0', 'float32', [1, 'T', 3072])]);
    expect(bindTalker(anonymous.inputs, anonymous.outputs, dims)).toMatchObject({ logits: 'output_0', hidden: 'output_1' });
    // Nothing but graph order: logits first, then hidden states, as the exports list them.
    const symbolic = talkerValues('float32', [value('a', 'float32', [1, 'T', 'V']), value('b', 'float32', [1, 'T', 'H'])]);
    expect(bindTalker(symbolic.inputs, symbolic.outputs, dims)).toMatchObject({ logits: 'a', hidden: 'b' });
  });

  it('pairs past inputs with present outputs by name, or in order when the names differ', () => {
    expect(pairCache(['past_key_values.0.key', 'past_key_values.0.value'], ['present.0.value', 'present.0.key'])).toEqual([
      { past: 'past_key_values.0.key', present: 'present.0.key' },
      { past: 'past_key_values.0.value', present: 'present.0.value' },
    ]);
    expect(pairCache(['past_kv', 'past_kv_0_1'], ['present_kv_out', 'onnx::Concat_99'])).toEqual([
      { past: 'past_kv', present: 'present_kv_out' },
      { past: 'past_kv_0_1', present: 'onnx::Concat_99' },
    ]);
    expect(() => pairCache(['past_key_values.0.key', 'past_key_values.0.value'], ['present.0.key'])).toThrow(/2 cache inputs and 1 cache outputs/);
    // Outputs that declare no shape are the cache too, once the logits and hidden states are bound.
    const inputs = [value('inputs_embeds', 'float32', [1, 'T', H]), value('position_ids', 'int64', [3, 1, 'T']), value('attention_mask', 'int64', [1, 'S']), kv('past_kv'), kv('past_kv_0_1')];
    const outputs = [value('logits', 'float32', [1, 'T', 3072]), value('hidden_states', 'float32', [1, 'T', H]), value('present_kv_out', 'float32', []), value('onnx::Concat_99', 'float32', [])];
    expect(bindTalker(inputs, outputs, dims).cache).toEqual([
      { past: 'past_kv', present: 'present_kv_out' },
      { past: 'past_kv_0_1', present: 'onnx::Concat_99' },
    ]);
  });

  it('names what is missing or of a type it cannot convert', () => {
    const noMask = talkerValues('float32', [value('logits', 'float32', [1, 'T', 3072]), value('hidden_states', 'float32', [1, 'T', H])]);
    noMask.inputs.splice(2, 1);
    expect(() => bindTalker(noMask.inputs, noMask.outputs, dims)).toThrow(/no integer value for 'attention_mask'/);
    const bf16 = talkerValues('float32', [value('logits', 'float32', [1, 'T', 3072]), value('hidden_states', 'float32', [1, 'T', H])]);
    bf16.inputs[0] = value('inputs_embeds', 'bfloat16', [1, 'T', H]);
    expect(() => bindTalker(bf16.inputs, bf16.outputs, dims)).toThrow("the talker's inputs_embeds is bfloat16, not float32 or float16");
  });

  it('binds the code predictor the same way', () => {
    const inputs = [value('talker_hidden', 'float16', [1, H]), value('codec_ids', 'int64', [1, 16])];
    expect(bindPredictor(inputs, [value('logits_Q4', 'float16', [1, 15, 2048])], { hidden: H, groups: 16 })).toEqual({
      hidden: 'talker_hidden',
      codes: 'codec_ids',
      logits: 'logits_Q4',
      types: { hidden: 'float16', logits: 'float16' },
      vocab: 2048,
    });
    // Inputs in another order under other names: by kind and shape.
    const renamed = [value('codes', 'int64', [1, 16]), value('state', 'float32', [1, H])];
    expect(bindPredictor(renamed, [value('out', 'float32', [1, 15, 'V'])], { hidden: H, groups: 16 })).toMatchObject({ hidden: 'state', codes: 'codes', logits: 'out', vocab: undefined });
  });

  it('converts floats at the boundary: halves in, halves out', () => {
    const values = Float32Array.from([0, 1, -2.5, 1 / 3, 65504, 1e-8]);
    const halves = toFloatType(values, 'float16') as Uint16Array;
    expect(halves).toBeInstanceOf(Uint16Array);
    expect(Array.from(readFloats('float16', halves))).toEqual([0, 1, -2.5, 0.333251953125, 65504, 0]);
    expect(Array.from(readFloats('float16', halves, 1, 3))).toEqual([1, -2.5]);
    expect(toFloatType(values, 'float32')).toBe(values);
    expect(readFloats('float32', values, 2, 4)).toEqual(values.subarray(2, 4));
    expect(() => readFloats('int64', new BigInt64Array(1))).toThrow(/int64/);
  });
});

describe('Qwen3-TTS fp16-boundary export (fixture)', () => {
  const paths: Record<'fp32' | 'fp16', GraphPaths> = {} as never;
  let fp32Dir: string;
  let fp16Dir: string;

  function graphPaths(dir: string): GraphPaths {
    const files = qwen3TtsFiles('customvoice');
    const at = (role: string) => path.join(dir, files[role]!);
    return { text_embed: at('text_embed'), codec_embed: at('codec_embed'), talker_cache: at('talker_cache'), code_predictor: at('code_predictor'), residual_embed: at('residual_embed') };
  }

  beforeAll(async () => {
    fp32Dir = await tinyQwen3TtsModel('customvoice');
    fp16Dir = await tinyQwen3TtsModel('customvoice', 'fp16');
    paths.fp32 = graphPaths(fp32Dir);
    paths.fp16 = graphPaths(fp16Dir);
  });

  it('declares what an int4/fp16 export declares: float16 I/O and renamed outputs', async () => {
    const talker = await ort.InferenceSession.create(paths.fp16.talker_cache);
    const predictor = await ort.InferenceSession.create(paths.fp16.code_predictor);
    try {
      const types = (meta: readonly ort.InferenceSession.ValueMetadata[]) => Object.fromEntries(meta.map((m) => [m.name, m.isTensor ? m.type : 'none']));
      expect(types(talker.inputMetadata)).toMatchObject({ inputs_embeds: 'float16', position_ids: 'int64', attention_mask: 'int64', [talkerPastName(0, 'key')]: 'float16' });
      expect(types(talker.outputMetadata)).toMatchObject({ [FP16_TALKER_OUTPUTS.logits]: 'float16', [FP16_TALKER_OUTPUTS.hidden_states]: 'float16', [talkerPresentName(0, 'key')]: 'float16' });
      expect(talker.outputNames).not.toContain('logits');
      expect(types(predictor.inputMetadata)).toEqual({ talker_hidden: 'float16', codec_ids: 'int64' });
      expect(predictor.outputNames).toEqual([FP16_PREDICTOR_OUTPUTS.logits]);
    } finally {
      await Promise.all([talker.release(), predictor.release()]);
    }
  });

  it('gives the fp32 talker’s logits and hidden states within fp16 rounding', async () => {
    const sessions = await Promise.all([paths.fp32.talker_cache, paths.fp16.talker_cache].map((file) => ort.InferenceSession.create(file)));
    try {
      const T = 7;
      const embeds = Float32Array.from({ length: T * H }, (_, i) => Math.sin(i * 0.37) * 2);
      const run = async (session: ort.InferenceSession, type: 'float32' | 'float16') => {
        const feeds: Record<string, ort.Tensor> = {
          inputs_embeds: new ort.Tensor(type, toFloatType(embeds, type), [1, T, H]),
          position_ids: new ort.Tensor('int64', BigInt64Array.from({ length: 3 * T }, (_, i) => BigInt(i % T)), [3, 1, T]),
          attention_mask: new ort.Tensor('int64', new BigInt64Array(T).fill(1n), [1, T]),
        };
        for (let l = 0; l < layers; l++) {
          for (const part of ['key', 'value'] as const) feeds[talkerPastName(l, part)] = new ort.Tensor(type, type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [1, kvHeads, 0, headDim]);
        }
        const out = await session.run(feeds);
        const logits = out.logits ?? out[FP16_TALKER_OUTPUTS.logits]!;
        const hidden = out.hidden_states ?? out[FP16_TALKER_OUTPUTS.hidden_states]!;
        return { logits: readFloats(logits.type, logits.data), hidden: readFloats(hidden.type, hidden.data) };
      };
      const full = await run(sessions[0]!, 'float32');
      const half = await run(sessions[1]!, 'float16');
      const worst = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!) / Math.max(1, Math.abs(x))), 0);
      expect(half.logits.length).toBe(full.logits.length);
      // fp16 keeps 11 significant bits: relative error ≈ 1e-3 per rounding, a few roundings deep.
      expect(worst(full.logits, half.logits)).toBeLessThan(2e-2);
      expect(worst(full.hidden, half.hidden)).toBeLessThan(2e-2);
      expect(worst(full.logits, half.logits)).toBeGreaterThan(0); // the boundary really is fp16
    } finally {
      await Promise.all(sessions.map((s) => s.release()));
    }
  });

  it('gives the fp32 code predictor’s logits within fp16 rounding', async () => {
    const sessions = await Promise.all([paths.fp32.code_predictor, paths.fp16.code_predictor].map((file) => ort.InferenceSession.create(file)));
    try {
      const hidden = Float32Array.from({ length: H }, (_, i) => Math.cos(i * 0.71) * 3);
      const codes = BigInt64Array.from({ length: 16 }, (_, g) => BigInt((g * 397) % 2048));
      const run = async (session: ort.InferenceSession, type: 'float32' | 'float16') => {
        const out = await session.run({ talker_hidden: new ort.Tensor(type, toFloatType(hidden, type), [1, H]), codec_ids: new ort.Tensor('int64', codes, [1, 16]) });
        const logits = out[session.outputNames[0]!]!;
        return readFloats(logits.type, logits.data);
      };
      const full = await run(sessions[0]!, 'float32');
      const half = await run(sessions[1]!, 'float16');
      expect(half.length).toBe(15 * 2048);
      const worst = full.reduce((m, x, i) => Math.max(m, Math.abs(x - half[i]!) / Math.max(1, Math.abs(x))), 0);
      expect(worst).toBeLessThan(2e-2);
      expect(worst).toBeGreaterThan(0);
    } finally {
      await Promise.all(sessions.map((s) => s.release()));
    }
  });

  it('loads through the family loader and speaks, as the fp32 export does', async () => {
    const installed = (dir: string): InstalledModel => {
      const files = Object.fromEntries(Object.entries(qwen3TtsFiles('customvoice')).map(([role, file]) => [role, path.join(dir, file)]));
      const entry = { id: 'q', kind: 'tts' as const, backend: 'onnx' as const, description: '', aliases: [], owned_by: 'test', license: 'apache-2.0', files: {}, defaults: {} };
      return { id: 'q', entry, source: 'local', files, sizeBytes: 0 };
    };
    const speak = async (dir: string) => {
      const runtime = await qwen3TtsLoader.load(installed(dir), { threads: 1 });
      try {
        let samples = 0;
        const { frames } = await runtime.synthesize({ text: 'Hello world.', speaker: 'Ryan', speed: 1, seed: 2 }, (block) => (samples += block.length), new AbortController().signal);
        return { frames, samples };
      } finally {
        await runtime.dispose();
      }
    };
    const [full, half] = await Promise.all([speak(fp32Dir), speak(fp16Dir)]);
    // "assistant", "\n", "Hello", " world", ".": the fixture's talker stops after 2 frames a token.
    expect(half).toEqual(full);
    expect(half.frames).toBe(10);
  });

  describe('through the frame loop', () => {
    const generators = {} as Record<'fp32' | 'fp16', FrameGenerator>;
    let greedy: TtsConfig;

    beforeAll(async () => {
      const configJson = JSON.parse(await readFile(path.join(fp16Dir, 'config.json'), 'utf8')) as Parameters<typeof parseTtsConfig>[0];
      expect(configJson).toEqual(qwen3TtsConfig('customvoice', TINY_QWEN3_TTS));
      greedy = parseTtsConfig(configJson, { ...qwen3TtsGenerationConfig(), do_sample: false, subtalker_dosample: false, repetition_penalty: 1 });
      const tokenizer = { vocab: path.join(fp16Dir, 'vocab.json'), merges: path.join(fp16Dir, 'merges.txt'), tokenizer_config: path.join(fp16Dir, 'tokenizer_config.json') };
      generators.fp32 = await FrameGenerator.create({ paths: paths.fp32, threads: 1, config: greedy, tokenizer });
      generators.fp16 = await FrameGenerator.create({ paths: paths.fp16, threads: 1, config: greedy, tokenizer });
    });

    afterAll(async () => {
      await Promise.all(Object.values(generators).map((g) => g?.release()));
    });

    async function codes(boundary: 'fp32' | 'fp16', request: Partial<GenerateRequest>): Promise<{ frames: Int32Array[]; reason: string }> {
      const frames: Int32Array[] = [];
      const result = await generators[boundary].generate({ text: 'Hello world, how are you?', speaker: 'ryan', language: 'english', seed: 3, maxFrames: 200, ...request }, (f) => frames.push(f), () => false);
      return { frames, reason: result.reason };
    }

    it('loads and makes the fp32 graphs’ codes under greedy decoding, in both prompt layouts', async () => {
      // Identical picks hold only where no two logits are closer than fp16 rounding (2^-7 near 10): over
      // many 2048-way picks a near tie comes up now and then and the two runs part there (as an fp16
      // export parts from the fp32 one). These utterances have none; a wrong binding or conversion
      // would change every code.
      const cases = [
        { layout: 'non-streaming', text: 'Hello world, how are you?' },
        { layout: 'streaming', text: 'The quick brown fox jumps over the lazy dog.' },
      ] as const;
      for (const request of cases) {
        const full = await codes('fp32', request);
        const half = await codes('fp16', request);
        expect(full.reason).toBe('eos');
        expect(full.frames.length).toBeGreaterThan(15);
        expect(half.frames).toEqual(full.frames);
      }
    });

    it('feeds the streaming layout’s trailing text into the frames: same length, other codes', async () => {
      const plain = await codes('fp32', { layout: 'non-streaming' });
      const streamed = await codes('fp32', { layout: 'streaming' });
      // The fixture's talker ends after 2 frames per ordinary text token it has read, prompt or trailing.
      expect(streamed.frames.length).toBe(plain.frames.length);
      expect(streamed.frames).not.toEqual(plain.frames);
    });
  });
});
