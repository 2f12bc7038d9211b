import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import onnxProto from 'onnx-proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTtsConfig, type ModelConfigJson } from '../../src/families/qwen3-tts/config.js';
import { FrameGenerator, type GenerateRequest, type GraphPaths } from '../../src/families/qwen3-tts/generator.js';
import { PREPARED_PLAN, type GraphPlan } from '../../src/families/qwen3-tts/prepared/open-prepared.js';
import { fileSha256, prepareCodePredictor } from '../../src/families/qwen3-tts/prepared/prepare-predictor.js';
import { readPredictorWeights } from '../../src/families/qwen3-tts/prepared/predictor-weights.js';
import {
  qwen3TtsFiles,
  TINY_QWEN3_TTS,
  TINY_QWEN3_TTS_INT4,
  TINY_QWEN3_TTS_WIDE_TALKER,
  tinyQwen3TtsModel,
  writeQwen3TtsModel,
  type Qwen3TtsVariant,
} from '../fixtures/onnx/qwen3-tts.js';

/**
 * The prepared graphs against the published ones, on the suite's synthetic
 * exports (the real graph structure and names, random weights): the
 * KV-cached code predictor must draw the same codes as the published graph,
 * greedy, for an utterance of each mode, and give its logits within a stated
 * tolerance; the 4-bit talker and predictor on int8 activations are
 * measured against the export's own accuracy level. A prepared graph is
 * never used with an export other than the one it was built from.
 */

const cache = (name: string) => fileURLToPath(new URL(`../.cache/${name}`, import.meta.url));
const EXACT: GraphPlan = { predictor: 'cached', int8: false };
const PUBLISHED: GraphPlan = { predictor: 'published', int8: false };
const dirs = {} as Record<'customvoice' | 'voicedesign' | 'base' | 'wide' | 'int4' | 'otherSeed', string>;
let scratch: string;

beforeAll(async () => {
  for (const variant of ['customvoice', 'voicedesign', 'base'] as const) dirs[variant] = await tinyQwen3TtsModel(variant);
  dirs.wide = await writeQwen3TtsModel(cache('qwen3-tts-voicedesign-wide-talker'), 'voicedesign', TINY_QWEN3_TTS_WIDE_TALKER);
  dirs.int4 = await writeQwen3TtsModel(cache('qwen3-tts-customvoice-int4'), 'customvoice', TINY_QWEN3_TTS_INT4);
  dirs.otherSeed = await writeQwen3TtsModel(cache('qwen3-tts-customvoice-seed2'), 'customvoice', TINY_QWEN3_TTS, 2);
  scratch = await mkdtemp(path.join(os.tmpdir(), 'lserve-qwen3-prepared-'));
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

const file = (dir: string, variant: Qwen3TtsVariant, role: string) => path.join(dir, qwen3TtsFiles(variant)[role]!);

async function open(dir: string, variant: Qwen3TtsVariant, graphs: GraphPlan, paths: Partial<GraphPaths> = {}): Promise<FrameGenerator> {
  const config = parseTtsConfig(JSON.parse(await readFile(file(dir, variant, 'config'), 'utf8')) as ModelConfigJson, { do_sample: false, subtalker_dosample: false });
  const graph = (role: keyof GraphPaths) => file(dir, variant, role);
  return FrameGenerator.create({
    paths: {
      text_embed: graph('text_embed'),
      codec_embed: graph('codec_embed'),
      talker_cache: graph('talker_cache'),
      code_predictor: graph('code_predictor'),
      residual_embed: graph('residual_embed'),
      ...(variant === 'base' ? { tok_encoder: graph('tok_encoder'), speaker_encoder: graph('speaker_encoder') } : {}),
      ...paths,
    },
    threads: 1,
    config,
    tokenizer: { vocab: file(dir, variant, 'vocab'), merges: file(dir, variant, 'merges'), tokenizer_config: file(dir, variant, 'tokenizer_config') },
    graphs,
  });
}

async function codes(generator: FrameGenerator, request: GenerateRequest): Promise<Int32Array[]> {
  const frames: Int32Array[] = [];
  await generator.generate(request, (frame) => frames.push(frame), () => false);
  return frames;
}

/** Codes of one utterance with each plan, the generators released afterwards. */
async function codesBy(dir: string, variant: Qwen3TtsVariant, plans: GraphPlan[], request: (g: FrameGenerator) => Promise<GenerateRequest>, paths?: Partial<GraphPaths>) {
  const results: Array<{ frames: Int32Array[]; notes: string }> = [];
  for (const plan of plans) {
    const generator = await open(dir, variant, plan, paths);
    try {
      results.push({ frames: await codes(generator, await request(generator)), notes: generator.graphNotes });
    } finally {
      await generator.release();
    }
  }
  return results;
}

/** A 24 kHz reference "voice": a chirp with some noise. */
function referenceVoice(seconds: number, pitch: number): Float32Array {
  const out = new Float32Array(Math.round(seconds * 24000));
  for (let i = 0; i < out.length; i++) out[i] = 0.4 * Math.sin((2 * Math.PI * pitch * i) / 24000 + 1e-5 * i * i) + 0.05 * Math.sin(i * 12.9898);
  return out;
}

const GOLDEN: Record<'customvoice' | 'voicedesign' | 'base', (g: FrameGenerator) => Promise<GenerateRequest>> = {
  customvoice: async () => ({ text: 'Hello world. How are you today, my friend?', speaker: 'ryan', language: 'english', seed: 1, maxFrames: 200 }),
  voicedesign: async () => ({ text: 'The weather is lovely this morning.', instruct: 'A calm, low voice, speaking slowly.', seed: 1, maxFrames: 200 }),
  base: async (g) => {
    const reference = await g.encodeReference(referenceVoice(2, 140), true);
    return { text: 'Hello world. How are you today, my friend? I hope the week went well.', xvector: reference.xvector, reference: { text: 'Hi there.', frames: reference.frames }, seed: 1, maxFrames: 200 };
  },
};

const agreement = (a: Int32Array[], b: Int32Array[]) => {
  let same = 0;
  let all = 0;
  a.forEach((frame, f) => frame.forEach((code, g) => ((same += Number(code === b[f]?.[g])), all++)));
  return same / all;
};

describe('the KV-cached code predictor', () => {
  it.each(['customvoice', 'voicedesign', 'base'] as const)('draws the published graph’s codes, greedy (%s)', async (variant) => {
    const [published, cached, asServed] = await codesBy(dirs[variant], variant, [PUBLISHED, EXACT, PREPARED_PLAN], GOLDEN[variant]);
    expect(published!.frames.length).toBeGreaterThan(10);
    expect(cached!.frames).toEqual(published!.frames);
    expect(asServed!.frames).toEqual(published!.frames);
    expect(cached!.notes).toMatch(/KV-cached code predictor, prepared in memory/);
    expect(published!.notes).toMatch(/published code predictor/);
  });

  it('gives the published logits within 1e-5 of the largest (a float16 boundary: within its rounding), and with a talker wider than the predictor (1.7B)', async () => {
    const fp16 = await tinyQwen3TtsModel('customvoice', 'fp16');
    // The fp16 export gives its logits as float16: half a unit in the last place is 2⁻¹¹ ≈ 4.9e-4 of a value.
    for (const [dir, variant, tolerance] of [[dirs.customvoice, 'customvoice', 1e-5], [fp16, 'customvoice', 5e-4], [dirs.wide, 'voicedesign', 1e-5]] as const) {
      const config = parseTtsConfig(JSON.parse(await readFile(file(dir, variant, 'config'), 'utf8')), {});
      const prepared = await prepareCodePredictor(file(dir, variant, 'code_predictor'), config.predictorDims, 16, 1, config.predictor);
      expect(prepared.quantized).toBe(false);
      expect(prepared.difference.exact).toBeLessThan(tolerance);
    }
    // The wide model reads the state through the projection, which the cached graph applies to its own rows.
    const model = onnxProto.onnx.ModelProto.decode(await readFile(file(dirs.wide, 'voicedesign', 'code_predictor')));
    expect(readPredictorWeights(model, 16).projection).toBeDefined();
    const [published, cached] = await codesBy(dirs.wide, 'voicedesign', [PUBLISHED, EXACT], GOLDEN.voicedesign);
    expect(cached!.frames).toEqual(published!.frames);
  });

  it('4-bit: exact at the export’s accuracy level; int8 activations move the logits by under 2 %, the draws by under 5 %', async () => {
    const config = parseTtsConfig(JSON.parse(await readFile(file(dirs.int4, 'customvoice', 'config'), 'utf8')), {});
    const prepared = await prepareCodePredictor(file(dirs.int4, 'customvoice', 'code_predictor'), config.predictorDims, 16, 1, config.predictor);
    expect(prepared.quantized).toBe(true);
    expect(prepared.difference.exact).toBeLessThan(1e-5);
    // int8 activations are another computation: measured, not zero.
    expect(prepared.difference.prepared).toBeGreaterThan(0);
    expect(prepared.difference.prepared).toBeLessThan(0.02);
    // Sampled as the model asks (temperature 0.9, top 50), a draw with the same random number comes out otherwise this often.
    expect(prepared.difference.sampling).toBeLessThan(0.05);
    const [published, cached, int8] = await codesBy(dirs.int4, 'customvoice', [PUBLISHED, EXACT, PREPARED_PLAN], GOLDEN.customvoice);
    expect(cached!.frames).toEqual(published!.frames);
    expect(int8!.notes).toMatch(/talker on int8 activations/);
    // Greedy, a random model's near-even logits let a 0.5 % change pick another code within a few frames, and the run goes its own way from there.
    const same = agreement(int8!.frames, published!.frames);
    console.log(
      `int4 tiny model, int8 activations: logits ${(prepared.difference.prepared * 100).toFixed(2)} % of the largest apart, ` +
        `sampling distributions ${(prepared.difference.sampling * 100).toFixed(2)} % apart; greedy runs share ${(same * 100).toFixed(1)} % of their codes`,
    );
  });
});

describe('a predictor prepared at pull', () => {
  async function preparedAtPull(dir: string) {
    const source = file(dir, 'customvoice', 'code_predictor');
    const config = parseTtsConfig(JSON.parse(await readFile(file(dir, 'customvoice', 'config'), 'utf8')), {});
    const prepared = await prepareCodePredictor(source, config.predictorDims, 16, 1, config.predictor);
    const target = path.join(scratch, `prepared-${path.basename(dir)}.onnx`);
    await writeFile(target, prepared.model);
    return { file: target, source: prepared.source };
  }

  it('is used with the export it was built from, and never with another one', async () => {
    const prepared = await preparedAtPull(dirs.customvoice);
    expect(prepared.source).toBe(await fileSha256(file(dirs.customvoice, 'customvoice', 'code_predictor')));
    const plan: GraphPlan = { ...PREPARED_PLAN, files: { code_predictor: prepared } };
    const [own, published] = await codesBy(dirs.customvoice, 'customvoice', [plan, PUBLISHED], GOLDEN.customvoice);
    expect(own!.notes).toMatch(/KV-cached code predictor prepared at pull/);
    expect(own!.frames).toEqual(published!.frames);

    // The same model folder with another export's code_predictor.onnx (another seed): the prepared file is not used.
    const [mismatched, otherPublished] = await codesBy(dirs.customvoice, 'customvoice', [plan, PUBLISHED], GOLDEN.customvoice, { code_predictor: file(dirs.otherSeed, 'customvoice', 'code_predictor') });
    expect(mismatched!.notes).toMatch(/prepared at pull was built from another code_predictor\.onnx/);
    expect(otherPublished!.frames).not.toEqual(published!.frames);
    expect(mismatched!.frames).toEqual(otherPublished!.frames);
  });

  it('a graph it cannot read runs as published, and the load line says why', async () => {
    const model = onnxProto.onnx.ModelProto.decode(await readFile(file(dirs.customvoice, 'customvoice', 'code_predictor')));
    // An exporter that names no weight after its module: nothing to build the cache from.
    const renamed = new Map(model.graph!.initializer!.map((t, i) => [t.name!, `onnx::weight_${i}`]));
    for (const t of model.graph!.initializer!) t.name = renamed.get(t.name!)!;
    for (const n of model.graph!.node!) n.input = n.input!.map((name) => renamed.get(name) ?? name);
    const anonymous = path.join(scratch, 'code_predictor.onnx');
    await writeFile(anonymous, onnxProto.onnx.ModelProto.encode(model).finish());
    const [fallback, published] = await codesBy(dirs.customvoice, 'customvoice', [PREPARED_PLAN, PUBLISHED], GOLDEN.customvoice, { code_predictor: anonymous });
    expect(fallback!.notes).toMatch(/the published code predictor: no KV-cached one can be built from it \(no decoder layers named like/);
    expect(fallback!.frames).toEqual(published!.frames);
    await copyFile(file(dirs.customvoice, 'customvoice', 'code_predictor'), anonymous);
  });
});
