import { readFile, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Engine } from '../../src/compose.js';
import type { SpeechRuntime, SynthesisRequest } from '../../src/core/tasks/speak/synthesizer.js';
import { ReplyVoice, type SpeechSettings } from '../../src/realtime/reply-voice.js';
import { tinyQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';
import { holdModel } from '../helpers/held-model.js';
import { SPEECH_WAV } from '../helpers/realtime.js';

/**
 * A spoken reply's voice (src/realtime/reply-voice.ts) on the synthetic
 * Qwen3-TTS voice-clone model: prepared once for all the sentences of the
 * reply — one lease, one decoded reference, the same object handed to the
 * runtime for every sentence — and released when the reply ends, is
 * cancelled or fails.
 */

let home: string;
let engine: Engine;
let runtime: SpeechRuntime;
let release: (() => Promise<void>) | undefined;
let reference: Buffer;

beforeAll(async () => {
  home = await mkdtemp(path.join(os.tmpdir(), 'lserve-reply-voice-'));
  engine = new Engine({ home, log: () => {}, threads: 1 });
  await engine.store.registerDirectory(await tinyQwen3TtsModel('base'), { kind: 'tts', id: 'qwen-clone' });
  reference = await readFile(SPEECH_WAV);
  // Held for the whole file, so the voice uses this very runtime (and the lease count starts at one).
  ({ runtime, release } = await holdModel<SpeechRuntime>(engine, 'qwen-clone', ['tts']));
}, 120_000);

afterAll(async () => {
  await release?.();
  await engine?.close();
  if (home) await rm(home, { recursive: true, force: true });
});

const SENTENCES = ['Sure, here it is.', 'The weather is mild today.', 'Anything else?'];
const leases = () => engine.manager.loaded().find((m) => m.id === 'qwen-clone')?.activeRequests;

/** A reply's voice with these settings, `sentences` handed over at once; what the engine and the runtime saw. */
async function speak(settings: SpeechSettings, sentences: string[], signal = new AbortController().signal, onAudio = () => {}) {
  const acquire = vi.spyOn(engine, 'acquire');
  const synthesize = vi.spyOn(runtime, 'synthesize');
  try {
    const voice = new ReplyVoice(engine, settings, { audio: onAudio, holdText: async () => () => {} }, signal);
    for (const sentence of sentences) voice.say(sentence);
    await voice.end();
    return { voice, acquired: acquire.mock.calls.length, requests: synthesize.mock.calls.map(([request]) => request as SynthesisRequest) };
  } finally {
    acquire.mockRestore();
    synthesize.mockRestore();
  }
}

const clone: SpeechSettings = { model: 'qwen-clone', speed: 1, refAudio: undefined, refText: 'hello world, this is a test', seed: 0 };

describe('a reply’s voice', () => {
  it('is prepared once for every sentence of the reply, and released at its end', async () => {
    const { voice, acquired, requests } = await speak({ ...clone, refAudio: reference }, SENTENCES);
    expect(voice.error).toBeUndefined();
    expect(acquired).toBe(1);
    expect(requests.map((r) => r.text)).toEqual(SENTENCES);
    // One decoded reference for the whole reply: a runtime may keep what it derives from it.
    expect(new Set(requests.map((r) => r.reference)).size).toBe(1);
    expect(requests[0]!.reference!.samples.length).toBeGreaterThan(0);
    expect(voice.spoken.map((s) => s.text)).toEqual(SENTENCES);
    expect(voice.spoken.every((s, i) => s.start === (voice.spoken[i - 1]?.end ?? 0) && s.end > s.start)).toBe(true);
    expect(leases()).toBe(1);
  }, 60_000);

  it('is released when the reply is cancelled, the sentences after it left unspoken', async () => {
    const controller = new AbortController();
    const { voice, acquired } = await speak({ ...clone, refAudio: reference }, SENTENCES, controller.signal, () => controller.abort(new Error('barge-in')));
    expect(acquired).toBe(1);
    // Stopped at its first audio: the tiny model may have made that sentence's whole audio in one block.
    expect(voice.spoken.map((s) => s.text)).toEqual(SENTENCES.slice(0, 1));
    expect(leases()).toBe(1);
  }, 60_000);

  it('that cannot be prepared fails the reply once, and holds nothing', async () => {
    const { voice, acquired, requests } = await speak(clone, SENTENCES);
    expect((voice.error as { param?: string }).param).toBe('ref_audio');
    expect(acquired).toBe(1);
    expect(requests).toEqual([]);
    expect(voice.spoken).toEqual([]);
    expect(leases()).toBe(1);
  }, 60_000);

  it('is never prepared for a reply with nothing to say', async () => {
    const { voice, acquired } = await speak({ ...clone, refAudio: reference }, []);
    expect(voice.error).toBeUndefined();
    expect(acquired).toBe(0);
  });
});
