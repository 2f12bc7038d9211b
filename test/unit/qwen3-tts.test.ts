import path from 'node:path';
import { statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3TtsLoader, type Qwen3TtsRuntime } from '../../src/families/qwen3-tts/loader.js';
import { FRAMES_PER_SECOND, frameLimit, MAX_PIECE_SECONDS } from '../../src/families/qwen3-tts/runtime.js';
import { STREAMING_BLOCKS, STREAMING_MAX_BLOCK, StreamingBlocks, nextBlockSize, type BlockDecoder } from '../../src/families/qwen3-tts/codec.js';
import type { GeneratorWorker } from '../../src/families/qwen3-tts/worker-client.js';
import { parseTtsConfig } from '../../src/families/qwen3-tts/config.js';
import { FirstCodeSampler, Rng, Sampler } from '../../src/families/qwen3-tts/sampling.js';
import { loadTtsTokenizer } from '../../src/families/qwen3-tts/tokenizer.js';
import { OnnxSession, type Feed } from '../../src/runtimes/onnx/session.js';
import { InvalidRequestError } from '../../src/core/errors.js';
import type { InstalledModel } from '../../src/core/store.js';
import type { SynthesisRequest } from '../../src/core/tasks/speak/synthesizer.js';
import {
  CODEC_VOCAB,
  FRAMES_PER_TEXT_TOKEN,
  QWEN3_TTS_CODEC,
  QWEN3_TTS_TOKENS,
  SAMPLES_PER_FRAME,
  TINY_QWEN3_TTS,
  qwen3TtsConfig,
  qwen3TtsFiles,
  qwen3TtsGenerationConfig,
  talkerPastName,
  talkerPresentName,
  tinyQwen3TtsModel,
  type Qwen3TtsVariant,
} from '../fixtures/onnx/qwen3-tts.js';

/**
 * The Qwen3-TTS runtime on the suite's synthetic exports (the real graph
 * interfaces, vocabularies, ids and tokenizer; random weights). The talker's
 * eos logit is steered by a counter (2 frames per ordinary text token of the
 * prompt, see test/fixtures/onnx/qwen3-tts/graphs.ts), so frame counts are
 * predictable from the text's tokens.
 */

const dirs = {} as Record<Qwen3TtsVariant, string>;
const runtimes = {} as Record<Qwen3TtsVariant, Qwen3TtsRuntime>;

function installed(variant: Qwen3TtsVariant): InstalledModel {
  const dir = dirs[variant];
  const files = Object.fromEntries(Object.entries(qwen3TtsFiles(variant)).map(([role, file]) => [role, path.join(dir, file)]));
  const id = `qwen3-tts-${variant}-test`;
  return {
    id,
    entry: { id, kind: 'tts', backend: 'onnx', description: 'synthetic', aliases: [], owned_by: 'test', license: 'apache-2.0', files: {}, defaults: {} },
    source: 'local',
    files,
    sizeBytes: Object.values(files).reduce((sum, f) => sum + statSync(f).size, 0),
  };
}

interface Spoken {
  frames: number;
  blocks: Float32Array[];
  samples: Float32Array;
}

async function speak(variant: Qwen3TtsVariant, request: Partial<SynthesisRequest> & { text: string }, signal = new AbortController().signal): Promise<Spoken> {
  const blocks: Float32Array[] = [];
  const { frames } = await runtimes[variant].synthesize({ speed: 1, seed: 1, ...request }, (block) => blocks.push(block), signal);
  const samples = new Float32Array(blocks.reduce((n, b) => n + b.length, 0));
  let at = 0;
  for (const b of blocks) {
    samples.set(b, at);
    at += b.length;
  }
  return { frames, blocks, samples };
}

const maxAbsDiff = (a: Float32Array, b: Float32Array) => a.reduce((max, x, i) => Math.max(max, Math.abs(x - b[i]!)), 0);
const rms = (x: Float32Array) => Math.sqrt(x.reduce((s, v) => s + v * v, 0) / Math.max(1, x.length));

/** Frames the steered talker makes: 2 per ordinary token of the prompt ("assistant", "\n" and the text's). */
const expectedFrames = (textTokens: number, extraTokens = 0) => FRAMES_PER_TEXT_TOKEN * (2 + textTokens + extraTokens);

/** A 24 kHz reference "voice": a chirp with some noise. */
function referenceVoice(seconds: number, pitch: number): Float32Array {
  const out = new Float32Array(Math.round(seconds * 24000));
  for (let i = 0; i < out.length; i++) out[i] = 0.4 * Math.sin((2 * Math.PI * pitch * i) / 24000 + 1e-5 * i * i) + 0.05 * Math.sin(i * 12.9898);
  return out;
}

beforeAll(async () => {
  for (const variant of ['customvoice', 'voicedesign', 'base'] as const) dirs[variant] = await tinyQwen3TtsModel(variant);
  const loaded = await Promise.all((['customvoice', 'voicedesign', 'base'] as const).map((v) => qwen3TtsLoader.load(installed(v), { threads: 1 })));
  [runtimes.customvoice, runtimes.voicedesign, runtimes.base] = loaded;
});

afterAll(async () => {
  await Promise.all(Object.values(runtimes).map((r) => r?.dispose()));
});

describe('Qwen3-TTS model info', () => {
  it('reads the mode, speakers and languages from config.json', () => {
    const languages = ['Chinese', 'English', 'German', 'Italian', 'Portuguese', 'Spanish', 'Japanese', 'Korean', 'French', 'Russian'];
    expect(runtimes.customvoice.info).toEqual({
      sampleRate: 24000,
      mode: 'preset',
      languages,
      speakers: ['Serena', 'Vivian', 'Uncle_Fu', 'Ryan', 'Aiden', 'Ono_Anna', 'Sohee', 'Eric', 'Dylan'],
      defaultSpeaker: 'Ryan',
      rateControl: false,
      framesPerSecond: 12.5,
      maxPieceChars: 234,
    });
    expect(runtimes.voicedesign.info).toMatchObject({ mode: 'design', speakers: [], languages, sampleRate: 24000, framesPerSecond: 12.5 });
    expect(runtimes.voicedesign.info.defaultSpeaker).toBeUndefined();
    expect(runtimes.base.info).toMatchObject({ mode: 'clone', speakers: [], languages, sampleRate: 24000, framesPerSecond: 12.5 });
    expect(runtimes.customvoice.memoryBytes).toBeGreaterThan(0);
  });

  it('takes speakers given as one-element lists, and falls back to upstream ids', () => {
    const config = qwen3TtsConfig('customvoice', TINY_QWEN3_TTS) as { talker_config: Record<string, unknown> };
    const parsed = parseTtsConfig(
      { tts_model_type: 'custom_voice', talker_config: { spk_id: { serena: [3066], uncle_fu: [3010] } } },
      qwen3TtsGenerationConfig(),
    );
    expect([...parsed.speakers]).toEqual([['serena', 3066], ['uncle_fu', 3010]]);
    expect(parsed.speakerNames).toEqual(['Serena', 'Uncle_Fu']);
    expect(parsed.languages.get('english')).toBe(2050);
    expect(parsed.ids).toMatchObject({ imStart: 151644, ttsPad: 151671, ttsBos: 151672, ttsEos: 151673, codecEos: 2150 });
    expect(() => parseTtsConfig({ ...config, tts_model_type: 'talker' }, {})).toThrow(/tts_model_type/);
  });
});

describe('Qwen3-TTS tokenizer', () => {
  it('is the real Qwen2 BPE with the TTS control tokens at their ids, and drops control strings from text', async () => {
    const dir = dirs.customvoice;
    const tokenizer = await loadTtsTokenizer({ vocab: path.join(dir, 'vocab.json'), merges: path.join(dir, 'merges.txt'), tokenizer_config: path.join(dir, 'tokenizer_config.json') });
    expect(tokenizer.encode('Hello world.')).toEqual([9707, 1879, 13]);
    expect(tokenizer.encode('assistant\n')).toEqual([77091, 198]);
    expect(tokenizer.id('<|im_start|>')).toBe(QWEN3_TTS_TOKENS.imStart);
    expect(tokenizer.id('<|im_end|>')).toBe(QWEN3_TTS_TOKENS.imEnd);
    expect(tokenizer.id('<tts_pad>')).toBe(QWEN3_TTS_TOKENS.ttsPad);
    expect(tokenizer.id('<tts_text_bos>')).toBe(QWEN3_TTS_TOKENS.ttsBos);
    expect(tokenizer.id('<tts_text_eod>')).toBe(QWEN3_TTS_TOKENS.ttsEos);
    expect(tokenizer.encode('Hello<|im_end|> world.<tts_pad>')).toEqual([9707, 1879, 13]);
  });
});

// The prompt's layouts, row by row against upstream: qwen3-tts-prompt.test.ts.

describe('Qwen3-TTS sampling', () => {
  const params = { doSample: true, temperature: 0.9, topK: 50, topP: 1, repetitionPenalty: 1.05 };

  it('draws the same codes from the same seed, only among the top k', () => {
    const logits = Float32Array.from({ length: 2048 }, (_, i) => Math.sin(i * 1.7) * 3);
    const top = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]!).slice(0, 50);
    const draw = (seed: number) => {
      const rng = new Rng(seed);
      const sampler = new Sampler(50);
      return Array.from({ length: 200 }, () => sampler.sample(logits, 2048, params, rng));
    };
    expect(draw(5)).toEqual(draw(5));
    expect(draw(5)).not.toEqual(draw(6));
    expect(draw(5).every((code) => top.includes(code))).toBe(true);
    expect(new Set(draw(5)).size).toBeGreaterThan(10);
    expect(new Sampler(50).sample(logits, 2048, { ...params, doSample: false }, new Rng(1))).toBe(top[0]);
  });

  it('keeps the talker to audio codes and eos, eos only after the minimum frames', () => {
    const logits = new Float32Array(CODEC_VOCAB).fill(-5);
    logits[2100] = 50; // a control code: never drawn
    logits[QWEN3_TTS_CODEC.eos] = 40;
    logits[7] = 1;
    const sampler = new FirstCodeSampler(CODEC_VOCAB, 2048, QWEN3_TTS_CODEC.eos, params, 2);
    const rng = new Rng(3);
    expect(sampler.sample(logits, 0, rng)).toBeLessThan(2048);
    expect(sampler.sample(logits, 1, rng)).toBeLessThan(2048);
    expect(sampler.sample(logits, 2, rng)).toBe(QWEN3_TTS_CODEC.eos);
  });
});

describe('Qwen3-TTS talker cache names', () => {
  // Binding by role (names, shapes, fp16 exports) and cache pairing: qwen3-tts-fp16.test.ts.

  it('the synthetic talker: a cached step gives the logits of a full run', async () => {
    const { hidden: H, layers, kvHeads, headDim } = TINY_QWEN3_TTS.talker;
    const session = await OnnxSession.create(path.join(dirs.customvoice, qwen3TtsFiles('customvoice').talker_cache!), { threads: 1 });
    try {
      const T = 6;
      const embeds = Float32Array.from({ length: T * H }, (_, i) => Math.sin(i * 0.37));
      const feeds = (rows: number, past: number, kept: boolean): Record<string, Feed> => {
        const out: Record<string, Feed> = {
          inputs_embeds: { type: 'float32', data: embeds.slice(past * H, (past + rows) * H), dims: [1, rows, H] },
          position_ids: { type: 'int64', data: BigInt64Array.from({ length: 3 * rows }, (_, i) => BigInt(past + (i % rows))), dims: [3, 1, rows] },
          attention_mask: { type: 'int64', data: new BigInt64Array(past + rows).fill(1n), dims: [1, past + rows] },
        };
        for (let l = 0; l < layers; l++) {
          for (const part of ['key', 'value'] as const) {
            out[talkerPastName(l, part)] = kept ? { kept: `c${l}${part}` } : { type: 'float32', data: new Float32Array(0), dims: [1, kvHeads, 0, headDim] };
          }
        }
        return out;
      };
      const keep = Object.fromEntries(Array.from({ length: layers }, (_, l) => (['key', 'value'] as const).map((p) => [talkerPresentName(l, p), `c${l}${p}`])).flat());
      const full = await session.runWith(feeds(T, 0, false), { fetch: ['logits'], rows: { logits: [T - 1] } });
      await session.runWith(feeds(T - 1, 0, false), { fetch: ['logits'], keep });
      const step = await session.runWith(feeds(1, T - 1, true), { fetch: ['logits'] });
      expect(maxAbsDiff(full.logits!.data as Float32Array, step.logits!.data as Float32Array)).toBeLessThan(1e-4);
    } finally {
      await session.release();
    }
  });
});

describe('Qwen3-TTS synthesis', () => {
  it('stops on eos after the frames the text asks for, and hands audio over in growing blocks', async () => {
    const spoken = await speak('customvoice', { text: 'Hello world.', speaker: 'Ryan', language: 'English' });
    expect(spoken.frames).toBe(expectedFrames(3));
    expect(spoken.samples.length).toBe(spoken.frames * SAMPLES_PER_FRAME);
    // The streaming decoder's blocks: the first after one frame, then twice the last.
    expect(spoken.blocks.map((b) => b.length / SAMPLES_PER_FRAME)).toEqual([1, 2, 4, 3]);
    expect(rms(spoken.samples)).toBeGreaterThan(0.05);
    expect(spoken.samples.every((x) => x >= -1 && x <= 1)).toBe(true);

    // 16 tokens → 36 frames: blocks of 1, 2, 4, 8, then the streaming decoder's largest (8), then the rest.
    const long = await speak('customvoice', { text: 'One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen.' });
    expect(long.frames).toBe(expectedFrames(16));
    expect(long.blocks.map((b) => b.length / SAMPLES_PER_FRAME)).toEqual([1, 2, 4, 8, 8, 8, 5]);
  });

  it('gives identical audio for the same seed, and other audio for another seed or speaker', async () => {
    const text = 'The same words again.';
    const a = await speak('customvoice', { text, speaker: 'Vivian', seed: 42 });
    const b = await speak('customvoice', { text, speaker: 'Vivian', seed: 42 });
    expect(b.samples).toEqual(a.samples);
    const otherSeed = await speak('customvoice', { text, speaker: 'Vivian', seed: 43 });
    expect(otherSeed.frames).toBe(a.frames);
    expect(maxAbsDiff(otherSeed.samples, a.samples)).toBeGreaterThan(0.1);
    const otherSpeaker = await speak('customvoice', { text, speaker: 'Serena', seed: 42 });
    expect(otherSpeaker.frames).toBe(a.frames);
    expect(maxAbsDiff(otherSpeaker.samples, a.samples)).toBeGreaterThan(0.1);
  });

  it('respects maxFrames', async () => {
    const spoken = await speak('customvoice', { text: 'A sentence that would take many frames to say out loud.', maxFrames: 5 });
    expect(spoken.frames).toBe(5);
    expect(spoken.samples.length).toBe(5 * SAMPLES_PER_FRAME);
  });

  it('decodes the same audio with any block policy', async () => {
    // Against upstream's decode of the whole: qwen3-tts-decoder-stream.test.ts; the published decoder's blocks: qwen3-tts-codec.test.ts.
    const runtime = runtimes.customvoice;
    const text = 'Blocks or not, the audio is the same.';
    const policy = runtime.blockPolicy;
    try {
      const streamed = await speak('customvoice', { text, seed: 9 });
      expect(streamed.frames).toBeLessThanOrEqual(25);
      expect(streamed.blocks.length).toBeGreaterThan(2);
      runtime.blockPolicy = { first: 1, growth: 1, max: 1 };
      const frames = await speak('customvoice', { text, seed: 9 });
      expect(frames.blocks).toHaveLength(frames.frames);
      expect(maxAbsDiff(streamed.samples, frames.samples)).toBeLessThan(1e-5);
      // The decoder's largest block (8 frames: STREAMING_MAX_BLOCK) holds: a policy asking for more gets 8.
      runtime.blockPolicy = { first: 25, growth: 1, max: 25 };
      const large = await speak('customvoice', { text, seed: 9 });
      expect(large.blocks[0]!.length).toBe(STREAMING_MAX_BLOCK * SAMPLES_PER_FRAME);
      expect(maxAbsDiff(streamed.samples, large.samples)).toBeLessThan(1e-5);
    } finally {
      runtime.blockPolicy = policy;
    }
  });

  it('holding the loop while each block decodes changes no sample; an abort while held stops at once', async () => {
    const runtime = runtimes.customvoice;
    const text = 'The first block is decoded alone, then the loop goes on.';
    const free = await speak('customvoice', { text, seed: 5 });
    runtime.holdBlocks = 'every';
    try {
      const held = await speak('customvoice', { text, seed: 5 });
      expect(held.frames).toBe(free.frames);
      expect(held.samples).toEqual(free.samples);
      // Aborted while the loop waits for the first block's decode: the worker sees the abort flag, and the next request runs.
      const controller = new AbortController();
      const reason = new Error('gone');
      const pending = runtime.synthesize({ text, speed: 1, seed: 5 }, () => controller.abort(reason), controller.signal);
      await expect(pending).rejects.toBe(reason);
      expect((await speak('customvoice', { text, seed: 5 })).samples).toEqual(free.samples);
    } finally {
      runtime.holdBlocks = 'none';
    }
  });

  it('holding every block, the loop stops on the frame where a block is cut and makes none while it decodes', async () => {
    const runtime = runtimes.customvoice;
    // The runtime's generator and decoder, watched: frames as they arrive, and how many had arrived when each decode started and ended.
    const inner = runtime as unknown as { generator: GeneratorWorker; codec: BlockDecoder };
    const { generator, codec } = inner;
    let arrived = 0;
    const decodes: Array<{ to: number; atStart: number; atEnd: number }> = [];
    const watched = Object.create(generator) as GeneratorWorker;
    watched.generate = (request, onFrame, signal, hold) => generator.generate(request, (codes) => (arrived++, onFrame(codes)), signal, hold);
    const watchedCodec = Object.create(codec) as BlockDecoder;
    watchedCodec.stream = () => {
      const stream = codec.stream();
      return {
        ...stream,
        decode: async (frames, from, to) => {
          const atStart = arrived;
          const samples = await stream.decode(frames, from, to);
          decodes.push({ to, atStart, atEnd: arrived });
          return samples;
        },
      };
    };
    Object.assign(inner, { generator: watched, codec: watchedCodec });
    runtime.holdBlocks = 'every';
    try {
      const { frames } = await speak('customvoice', { text: 'The loop waits for each block, and only for it.', seed: 5 });
      // The blocks the policy cuts from this many frames (1, 3, 7, 15, 23, …).
      const policy = new StreamingBlocks(runtime.blockPolicy, STREAMING_MAX_BLOCK);
      const ends: number[] = [];
      for (let f = 0; f < frames; f++) {
        policy.push(new Int32Array(16));
        for (let block = policy.take(false); block; block = policy.take(false)) ends.push(block.to);
      }
      for (let block = policy.take(true); block; block = policy.take(true)) ends.push(block.to);
      expect(ends.length).toBeGreaterThan(3);
      expect(decodes.map((d) => d.to)).toEqual(ends);
      // Every block but the last (cut once the generation ended): the loop had made exactly its frames, and made none while it decoded.
      for (const d of decodes.slice(0, -1)) expect(d).toEqual({ to: d.to, atStart: d.to, atEnd: d.to });
    } finally {
      Object.assign(inner, { generator, codec });
      runtime.holdBlocks = 'none';
    }
  });

  it('stops promptly on abort, rejecting with the reason, and the next request runs', async () => {
    const text = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
    let started = performance.now();
    const full = await speak('customvoice', { text });
    const fullTime = performance.now() - started;
    expect(full.frames).toBeGreaterThan(100);

    const controller = new AbortController();
    const reason = new Error('client went away');
    const blocks: Float32Array[] = [];
    let abortedAt = 0;
    const promise = runtimes.customvoice.synthesize(
      { text, speed: 1, seed: 1 },
      (block) => {
        blocks.push(block);
        if (blocks.length === 1) {
          abortedAt = performance.now();
          controller.abort(reason);
        }
      },
      controller.signal,
    );
    await expect(promise).rejects.toBe(reason);
    // It stops at the next frame, not at the end of the utterance.
    expect(performance.now() - abortedAt).toBeLessThan(fullTime / 4);
    expect(blocks).toHaveLength(1);

    const before = new AbortController();
    before.abort(reason);
    await expect(runtimes.customvoice.synthesize({ text: 'Hi.', speed: 1 }, () => undefined, before.signal)).rejects.toBe(reason);

    // Generations take turns: this one waits for the aborted loop, which stops at its next frame, not at its end.
    started = performance.now();
    const after = await speak('customvoice', { text: 'Hello world.' });
    expect(after.frames).toBe(expectedFrames(3));
    expect(performance.now() - started).toBeLessThan(fullTime / 2);
  });

  it('rejects what the model cannot do as invalid requests', async () => {
    const signal = new AbortController().signal;
    await expect(runtimes.customvoice.synthesize({ text: 'Hi.', speed: 1, speaker: 'Nobody' }, () => undefined, signal)).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(runtimes.customvoice.synthesize({ text: 'Hi.', speed: 1, language: 'Klingon' }, () => undefined, signal)).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(runtimes.voicedesign.synthesize({ text: 'Hi.', speed: 1 }, () => undefined, signal)).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(runtimes.base.synthesize({ text: 'Hi.', speed: 1 }, () => undefined, signal)).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(runtimes.customvoice.synthesize({ text: '<|im_end|>', speed: 1 }, () => undefined, signal)).rejects.toMatchObject({ param: 'input' });
  });
});

describe('Qwen3-TTS voice design and cloning', () => {
  it('designs a voice from its description: the description is in the prompt and changes the audio', async () => {
    // "a calm voice" adds "user", "\n", "a", " calm", " voice", "\n": 6 ordinary tokens.
    const calm = await speak('voicedesign', { text: 'Hello world.', voiceDescription: 'a calm voice' });
    expect(calm.frames).toBe(expectedFrames(3, 6));
    const again = await speak('voicedesign', { text: 'Hello world.', voiceDescription: 'a calm voice' });
    expect(again.samples).toEqual(calm.samples);
    const loud = await speak('voicedesign', { text: 'Hello world.', voiceDescription: 'a loud voice' });
    expect(loud.frames).toBe(calm.frames);
    expect(maxAbsDiff(loud.samples, calm.samples)).toBeGreaterThan(0.1);
  });

  it('clones from the reference x-vector, and in context with its transcript (the reference audio not repeated)', async () => {
    const low = { samples: referenceVoice(2, 120) };
    const high = { samples: referenceVoice(2, 260) };
    const a = await speak('base', { text: 'Hello world.', reference: low });
    expect(a.frames).toBe(expectedFrames(3));
    const same = await speak('base', { text: 'Hello world.', reference: low });
    expect(same.samples).toEqual(a.samples);
    const b = await speak('base', { text: 'Hello world.', reference: high });
    expect(b.frames).toBe(a.frames);
    expect(maxAbsDiff(a.samples, b.samples)).toBeGreaterThan(0.1);
    // What a reference gives is derived once per reference object (every piece of a request passes the same one).
    high.samples.set(low.samples);
    expect((await speak('base', { text: 'Hello world.', reference: high })).samples).toEqual(b.samples);
    expect((await speak('base', { text: 'Hello world.', reference: { samples: high.samples } })).samples).toEqual(a.samples);

    // In context: the transcript's 3 tokens count, the reference's 25 frames (2 s) are spent already.
    const icl = await speak('base', { text: 'Hello world. How are you today, my friend?', reference: { samples: referenceVoice(2, 120), text: 'Hi there.' } });
    const textTokens = 11;
    expect(icl.frames).toBe(expectedFrames(textTokens, 3) - 25);
    expect(icl.samples.length).toBe(icl.frames * SAMPLES_PER_FRAME);
  });
});

describe('Qwen3-TTS block schedule', () => {
  it('cuts 2 frames, then doubles up to the decoder’s largest block, emits the rest at the end, and never emits reference context', () => {
    expect([0, 2, 4, 8, 16].map((p) => nextBlockSize(STREAMING_BLOCKS, p))).toEqual([2, 4, 8, 16, 32]);
    const capped = new StreamingBlocks(STREAMING_BLOCKS, 12);
    const sizes: number[] = [];
    for (let f = 0; f < 40; f++) {
      capped.push(new Int32Array(16));
      const block = capped.take(false);
      if (block) sizes.push(block.to - block.from);
    }
    sizes.push(...[capped.take(true)].map((b) => b!.to - b!.from));
    expect(sizes).toEqual([2, 4, 8, 12, 12, 2]);
    const blocks = new StreamingBlocks(STREAMING_BLOCKS, 12, [new Int32Array(16), new Int32Array(16)]);
    const cuts: Array<[number, number]> = [];
    for (let f = 0; f < 15; f++) {
      blocks.push(new Int32Array(16).fill(f));
      const block = blocks.take(false);
      if (block) cuts.push([block.from, block.to]);
    }
    for (let block = blocks.take(true); block; block = blocks.take(true)) cuts.push([block.from, block.to]);
    expect(cuts).toEqual([
      [2, 4],
      [4, 8],
      [8, 16],
      [16, 17],
    ]);
  });
});

describe('Qwen3-TTS frame limit per piece of text', () => {
  it('grows with the text, gives every character slow speech twice over, and never passes the absolute cap', () => {
    expect(frameLimit('')).toBe(Math.ceil(3 * FRAMES_PER_SECOND));
    expect(frameLimit('Hello there.')).toBe(Math.ceil((3 + 0.5 * 12) * FRAMES_PER_SECOND));
    // Characters, not UTF-16 units or bytes: a CJK sentence of 10 characters.
    expect(frameLimit('今天天气很好我们出去')).toBe(Math.ceil((3 + 0.5 * 10) * FRAMES_PER_SECOND));
    expect(frameLimit('x'.repeat(10_000))).toBe(MAX_PIECE_SECONDS * FRAMES_PER_SECOND);
    // Slow Chinese speech (4 characters a second) fits well inside its limit.
    const chars = 200;
    expect(frameLimit('字'.repeat(chars))).toBeGreaterThan((chars / 4) * FRAMES_PER_SECOND);
  });
});
