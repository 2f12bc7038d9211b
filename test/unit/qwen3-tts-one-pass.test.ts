import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Engine } from '../../src/compose.js';
import { prepareSpeech } from '../../src/core/tasks/speak.js';
import type { SpeechRuntime } from '../../src/core/tasks/speak/synthesizer.js';
import { parseTtsConfig } from '../../src/families/qwen3-tts/config.js';
import { FRAMES_PER_SECOND, frameLimit, LEAD_SECONDS, MAX_PIECE_SECONDS, onePassChars, SECONDS_PER_CHARACTER } from '../../src/families/qwen3-tts/runtime.js';
import { loadTtsTokenizer, type TtsTokenizer } from '../../src/families/qwen3-tts/tokenizer.js';
import { holdModel } from '../helpers/held-model.js';
import { FRAMES_PER_TEXT_TOKEN, SAMPLES_PER_FRAME, TINY_QWEN3_TTS, qwen3TtsConfig, qwen3TtsGenerationConfig, tinyQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';

/**
 * Upstream generates the whole text in one talker pass (its prosody runs
 * across sentences): so does lserve, up to onePassChars characters, and
 * splits longer input at sentence boundaries only. Observed through the real
 * speech task on the synthetic CustomVoice export: the pieces the task hands
 * the runtime, and the frames the talker makes — the fixture's talker stops
 * after 2 frames per ordinary token it read, the role block's "assistant"
 * and "\n" included, so n passes over T text tokens make 2·(T + 2n) frames.
 */

describe('one-pass length (onePassChars)', () => {
  const config = (json: Record<string, unknown> = {}, generation: Record<string, unknown> = {}) => {
    const base = qwen3TtsConfig('customvoice', TINY_QWEN3_TTS) as { talker_config: Record<string, unknown> };
    return parseTtsConfig({ ...base, talker_config: { ...base.talker_config, ...json } }, { ...qwen3TtsGenerationConfig(), ...generation });
  };

  it('is where a piece’s frame limit reaches its cap, for the 12 Hz models’ 32768 positions', () => {
    const chars = onePassChars(config());
    expect(chars).toBe(234);
    // Up to it every character keeps its slow-speech time; one more and the cap would cut it.
    const unclamped = (n: number) => LEAD_SECONDS + SECONDS_PER_CHARACTER * n;
    expect(unclamped(chars)).toBeLessThanOrEqual(MAX_PIECE_SECONDS);
    expect(unclamped(chars + 1)).toBeGreaterThan(MAX_PIECE_SECONDS);
    expect(frameLimit('x'.repeat(chars))).toBe(Math.ceil(unclamped(chars) * FRAMES_PER_SECOND));
  });

  it('shrinks with the export’s max_new_tokens and with a talker of few positions', () => {
    // 1000 frames = 80 s: (80 − 3) / 0.5.
    expect(onePassChars(config({}, { max_new_tokens: 1000 }))).toBe(154);
    // 3000 positions: 1500 frames and 1024 reserved rows leave 476, at 3 tokens a character.
    expect(onePassChars(config({ max_position_embeddings: 3000 }))).toBe(158);
    expect(onePassChars(config({ max_position_embeddings: 1000 }))).toBe(1);
  });
});

describe('the speech task on Qwen3-TTS: one pass up to the limit, sentences beyond', () => {
  let home: string;
  let engine: Engine;
  let runtime: SpeechRuntime;
  let tokenizer: TtsTokenizer;
  let release: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    const dir = await tinyQwen3TtsModel('customvoice');
    tokenizer = await loadTtsTokenizer({ vocab: path.join(dir, 'vocab.json'), merges: path.join(dir, 'merges.txt'), tokenizer_config: path.join(dir, 'tokenizer_config.json') });
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-qwen3-tts-one-pass-'));
    engine = new Engine({ home, log: () => {}, threads: 1 });
    await engine.store.registerDirectory(dir, { kind: 'tts', id: 'qwen-preset' });
    // Held for the whole file, so the task uses this very runtime.
    ({ runtime, release } = await holdModel<SpeechRuntime>(engine, 'qwen-preset', ['tts']));
  });

  afterAll(async () => {
    await release?.();
    await engine?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  /** Speaks `input` through the task; returns the pieces the runtime was handed and the frames made. */
  async function speak(input: string): Promise<{ pieces: string[]; frames: number }> {
    const synthesize = vi.spyOn(runtime, 'synthesize');
    try {
      const speech = await prepareSpeech(engine, { model: 'qwen-preset', input, voice: 'Ryan', seed: 5 });
      const { samples } = await speech.run(() => undefined, new AbortController().signal);
      return { pieces: synthesize.mock.calls.map(([request]) => request.text), frames: samples / SAMPLES_PER_FRAME };
    } finally {
      synthesize.mockRestore();
    }
  }

  const tokens = (text: string) => tokenizer.encode(text).length;

  it('hands a multi-sentence text under the limit over whole: one talker pass over all of it', async () => {
    const input = 'The first sentence is short. The second one asks a question? And the third one ends it all!';
    expect(input.length).toBeLessThan(runtime.info.maxPieceChars!);
    const { pieces, frames } = await speak(input);
    expect(pieces).toEqual([input]);
    expect(frames).toBe(FRAMES_PER_TEXT_TOKEN * (tokens(input) + 2));
  });

  it('splits a text over the limit at sentence boundaries only, each piece as long as fits', async () => {
    const sentences = Array.from({ length: 8 }, (_, i) => `Sentence number ${i + 1} says a few words of its own.`);
    const input = sentences.join(' ');
    const limit = runtime.info.maxPieceChars!;
    expect(input.length).toBeGreaterThan(limit);
    const { pieces, frames } = await speak(input);
    expect(pieces.length).toBe(2);
    expect(pieces.join(' ')).toBe(input);
    for (const piece of pieces) {
      expect(piece.length).toBeLessThanOrEqual(limit);
      expect(piece).toMatch(/^Sentence number \d+ .*\.$/);
    }
    // The first piece could not take one more sentence.
    expect(`${pieces[0]} ${sentences[pieces[0]!.split('. ').length]}`.length).toBeGreaterThan(limit);
    expect(frames).toBe(pieces.reduce((sum, piece) => sum + FRAMES_PER_TEXT_TOKEN * (tokens(piece) + 2), 0));
  });
});
