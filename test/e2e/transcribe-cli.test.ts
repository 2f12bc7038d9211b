import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRandom } from '../fixtures/gguf/format.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { tinyZipformerModel } from '../fixtures/onnx/zipformer.js';
import { runCli } from '../helpers/cli.js';

/**
 * `lserve transcribe` as a user runs it: the synthetic Whisper and streaming
 * Zipformer registered with `lserve pull <dir>`, files and stdin through the
 * built CLI.
 */

const SPEECH = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));
let home: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  home = await mkdtemp(path.join(os.tmpdir(), 'lserve-transcribe-cli-'));
  env = { LSERVE_HOME: home, LSERVE_CATALOG: '' };
  expect((await runCli(['pull', await tinyWhisperModel(), '--kind', 'asr', '--id', 'whisper-test', '--quiet'], { env })).code).toBe(0);
  expect((await runCli(['pull', await tinyZipformerModel(), '--kind', 'asr-stream', '--id', 'zip-test', '--quiet'], { env })).code).toBe(0);
}, 60_000);

afterAll(async () => {
  await rm(home, { recursive: true, force: true });
});

describe('lserve transcribe', () => {
  it('prints JSON for a file, and srt to -o', async () => {
    const json = await runCli(['transcribe', SPEECH, '--format', 'json', '--language', 'en', '--temperature', '0.5'], { env });
    expect(json.stderr).toBe('');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ text: expect.any(String), language: 'en', duration: expect.closeTo(4.187, 2) });
    const out = path.join(home, 'speech.srt');
    const srt = await runCli(['transcribe', SPEECH, '-f', 'srt', '--language', 'en', '--temperature', '0.5', '-o', out], { env });
    expect(srt.code).toBe(0);
    expect(srt.stdout).toBe('');
    expect(await readFile(out, 'utf8')).toMatch(/^1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n/);
  }, 60_000);

  it('reads audio from stdin with -', async () => {
    const result = await runCli(['transcribe', '-', '--format', 'verbose_json', '--language', 'en', '--temperature', '0.5'], { env, input: await readFile(SPEECH) });
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ task: 'transcribe', language: 'en', segments: expect.any(Array) });
  }, 60_000);

  it('reports a bad file and still exits non-zero; usage errors exit 2', async () => {
    const bad = await runCli(['transcribe', path.join(home, 'nope.wav')], { env });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('nope.wav: no such file');
    expect((await runCli(['transcribe'], { env })).code).toBe(2);
    expect((await runCli(['transcribe', SPEECH, '--format', 'docx'], { env })).code).toBe(2);
    expect((await runCli(['transcribe', SPEECH, '--temperature', '7'], { env })).code).toBe(2);
  }, 60_000);

  it('--stream turns PCM16 on stdin into caption lines (finals on their own lines)', async () => {
    const random = seededRandom(3);
    const seconds: Array<['sound' | 'silence', number]> = [['sound', 1.2], ['silence', 2.0], ['sound', 1.0]];
    const samples = seconds.flatMap(([what, s]) => Array.from({ length: s * 16_000 }, () => (what === 'sound' ? Math.round((random() * 2 - 1) * 6000) : 0)));
    const pcm = Buffer.alloc(samples.length * 2);
    samples.forEach((v, i) => pcm.writeInt16LE(v, i * 2));
    const result = await runCli(['transcribe', '--stream', '--model', 'zip-test'], { env, input: pcm });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const lines = result.stdout.split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThanOrEqual(2);
    expect(result.stdout).not.toContain('\r');
  }, 60_000);
});
