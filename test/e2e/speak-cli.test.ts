import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { fileURLToPath } from 'node:url';
import { TINY_QWEN3_TTS_INT4, tinyQwen3TtsModel, writeQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';
import { runCli } from '../helpers/cli.js';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { ModelStore } from '../../src/core/store.js';
import { qwen3TtsLoader } from '../../src/families/qwen3-tts/loader.js';

/**
 * `lserve speak` as a user runs it: the synthetic Piper voice and Qwen3-TTS
 * voice design model registered with `lserve pull <dir> --kind tts`, text
 * from the argument or stdin, the format from -o's extension or --format.
 */

let home: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  home = await mkdtemp(path.join(os.tmpdir(), 'lserve-speak-cli-'));
  env = { LSERVE_HOME: home, LSERVE_CATALOG: '' };
  expect((await runCli(['pull', await syntheticPiperVoice(), '--kind', 'tts', '--id', 'piper-test', '--quiet'], { env })).code).toBe(0);
  expect((await runCli(['pull', await tinyQwen3TtsModel('voicedesign'), '--kind', 'tts', '--id', 'design-test', '--quiet'], { env })).code).toBe(0);
}, 120_000);

afterAll(async () => {
  await rm(home, { recursive: true, force: true });
});

describe('lserve speak', () => {
  it('writes the text as WAV to -o, and another format from the extension', async () => {
    const out = path.join(home, 'hello.wav');
    const result = await runCli(['speak', 'Hello there. This is a test of the command line.', '-m', 'piper-test', '-o', out], { env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/hello\.wav: \d+\.\d\d s of wav at 22050 Hz/);
    const wav = await decodeAudio(await readFile(out), { sampleRate: 22_050 });
    expect(wav.format).toBe('wav');
    expect(wav.duration).toBeGreaterThan(1);
    const flac = path.join(home, 'hello.flac');
    expect((await runCli(['speak', 'Hello there. This is a test of the command line.', '-m', 'piper-test', '-o', flac], { env })).code).toBe(0);
    const decoded = await decodeAudio(await readFile(flac), { sampleRate: 22_050 });
    expect(decoded.format).toBe('flac');
    expect(decoded.duration).toBeCloseTo(wav.duration, 3);
  }, 60_000);

  it('reads stdin and writes raw PCM to stdout with -o -; --speed changes the duration', async () => {
    const text = 'Read from standard input.';
    const normal = await runCli(['speak', '-m', 'piper-test', '-o', '-', '--format', 'pcm'], { env, input: text });
    expect(normal.code, normal.stderr).toBe(0);
    // 16-bit little-endian mono samples at the voice's rate: the samples of the WAV of the same text.
    const wavFile = path.join(home, 'stdin.wav');
    expect((await runCli(['speak', text, '-m', 'piper-test', '-o', wavFile], { env })).code).toBe(0);
    const wav = await decodeAudio(await readFile(wavFile), { sampleRate: 22_050 });
    const pcm = normal.stdoutBytes;
    expect(pcm.length).toBe(2 * wav.samples.length);
    const worst = wav.samples.reduce((most, x, i) => Math.max(most, Math.abs(pcm.readInt16LE(2 * i) / 32768 - x)), 0);
    expect(worst).toBeLessThanOrEqual(1 / 32768);
    expect(wav.duration).toBeGreaterThan(0.5);
    // The synthetic voice's tones peak at 0.4 (test/fixtures/onnx/piper.ts): wrong byte order or sample type would not.
    const peak = wav.samples.reduce((most, x) => Math.max(most, Math.abs(x)), 0);
    expect(peak).toBeCloseTo(0.4, 3);
    const fast = await runCli(['speak', '-m', 'piper-test', '-o', '-', '--format', 'pcm', '--speed', '2'], { env, input: text });
    expect(fast.code, fast.stderr).toBe(0);
    expect(fast.stdoutBytes.length % 2).toBe(0);
    expect(fast.stdoutBytes.length / pcm.length).toBeCloseTo(0.5, 2);
  }, 60_000);

  it('--describe drives a voice design model; without it the error names the flag', async () => {
    const out = path.join(home, 'designed.wav');
    const designed = await runCli(['speak', 'Good evening.', '-m', 'design-test', '--describe', 'a calm, low voice', '--seed', '3', '-o', out], { env });
    expect(designed.code, designed.stderr).toBe(0);
    expect((await stat(out)).size).toBeGreaterThan(44);
    const missing = await runCli(['speak', 'Good evening.', '-m', 'design-test', '-o', out], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^lserve: Model 'design-test' designs a voice from a description: --describe is required/);
    expect(missing.stderr).not.toMatch(/voice_description/);
  }, 60_000);

  it('--list-voices lists speakers and languages of every synthesis model', async () => {
    const result = await runCli(['speak', '--list-voices'], { env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^piper-test\n {2}speakers: lessac\n {2}languages: auto, English\n/m);
    expect(result.stdout).toMatch(/^design-test \(voice design: --describe\)\n {2}languages: auto, .*English/m);
  }, 60_000);

  it('usage errors: no text, speed out of range, unknown voice', async () => {
    expect((await runCli(['speak', '-m', 'piper-test'], { env })).code).toBe(2);
    expect((await runCli(['speak', 'Hi.', '-m', 'piper-test', '--speed', '9'], { env })).code).toBe(2);
    const voice = await runCli(['speak', 'Hi there.', '-m', 'piper-test', '--voice', 'bob', '-o', path.join(home, 'x.wav')], { env });
    expect(voice.code).toBe(2);
    expect(voice.stderr).toMatch(/Speakers: lessac/);
  }, 60_000);
});

describe('lserve pull of a Qwen3-TTS export', () => {
  it('prepares the KV-cached code predictor, for 4-bit layers the talker on int8 activations, and the streaming codec decoder, once; the loader uses them', async () => {
    const dir = await writeQwen3TtsModel(fileURLToPath(new URL('../.cache/qwen3-tts-customvoice-int4', import.meta.url)), 'customvoice', TINY_QWEN3_TTS_INT4);
    const pulled = await runCli(['pull', dir, '--kind', 'tts', '--id', 'int4-test'], { env });
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stdout).toMatch(/code_predictor: KV-cached, one new row and one head a call \(logits within \S+ of the published graph's; int8 activations: logits within [\d.]+ %, draws [\d.]+ % apart;/);
    expect(pulled.stdout).toMatch(/talker_cache: 4-bit layers on int8 activations/);
    expect(pulled.stdout).toMatch(/tok_decoder: streaming, each frame decoded once \(samples within \S+ of the published graph's;/);
    const store = new ModelStore(home, Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)));
    const installed = (await store.resolve('int4-test'))!;
    expect(Object.keys(installed.files)).toEqual(expect.arrayContaining(['code_predictor_prepared', 'talker_cache_prepared', 'tok_decoder_prepared', 'prepared_sources']));
    expect((await stat(installed.files.code_predictor_prepared!)).size).toBeGreaterThan(0);

    const lines: string[] = [];
    const runtime = await qwen3TtsLoader.load(installed, { threads: 1, log: (line) => lines.push(line) });
    await runtime.dispose();
    expect(lines.join('\n')).toMatch(/the talker on int8 activations prepared at pull; the KV-cached code predictor prepared at pull, the streaming codec decoder prepared at pull/);

    const out = path.join(home, 'int4.wav');
    const spoken = await runCli(['speak', 'Hello there, this is a test.', '-m', 'int4-test', '-o', out], { env });
    expect(spoken.code, spoken.stderr).toBe(0);
    expect((await decodeAudio(await readFile(out), { sampleRate: 24_000 })).duration).toBeGreaterThan(0.5);
  }, 120_000);
});

