import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/**
 * whisper.cpp's own CLI (whisper-cli, built from the source nodejs-whisper
 * ships: see bench/asr.md) on a GGML file, its timings parsed from
 * whisper_print_timings: mel, encode (runs = 30 s windows), decode (runs =
 * single-token steps), batchd, prompt (runs = prompt evaluations), fallbacks.
 */

export interface WhisperCppRun {
  wallMs: number;
  melMs: number;
  encodeMs: number;
  encodeRuns: number;
  decodeMs: number;
  decodeRuns: number;
  batchdMs: number;
  batchdRuns: number;
  promptMs: number;
  promptRuns: number;
  sampleMs: number;
  fallbacks: string;
  /** whisper.cpp's own total (load included). */
  totalMs: number;
  loadMs: number;
  systemInfo: string;
}

export function whisperCli(binDir: string): string | undefined {
  const file = path.join(binDir, 'whisper-cli');
  return existsSync(file) ? file : undefined;
}

export interface WhisperCppOptions {
  threads: number;
  temperature: number;
  /** 0: no fallback (one temperature per window). */
  temperatureInc: number;
  /** Sequences sampled per window (whisper-cli runs greedy / sampling: --beam-size 1; its default is a 5-beam search). */
  bestOf: number;
  /** Text tokens of earlier windows that condition the next (0: none, as lserve at temperature ≥ 0.5). */
  maxContext: number;
  flashAttn?: boolean;
}

export async function runWhisperCli(bin: string, model: string, wav: string, o: WhisperCppOptions): Promise<WhisperCppRun> {
  const args = ['-m', model, '-f', wav, '-l', 'en', '-t', String(o.threads), '-tp', String(o.temperature), '-tpi', String(o.temperatureInc), '-bo', String(o.bestOf), '-bs', '1', '-mc', String(o.maxContext), '-ng'];
  if (o.temperatureInc <= 0) args.push('-nf');
  if (o.flashAttn === false) args.push('-nfa');
  const start = performance.now();
  const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => (err += chunk));
    child.on('error', reject);
    child.on('close', (c) => resolve({ code: c, stderr: err }));
  });
  const wallMs = performance.now() - start;
  if (code !== 0) throw new Error(`whisper-cli exited with ${code}: ${stderr.slice(-800)}`);
  const timing = (name: string): { ms: number; runs: number } => {
    const m = new RegExp(`${name} time =\\s*([\\d.]+) ms(?: /\\s*(\\d+) runs)?`).exec(stderr);
    if (!m) throw new Error(`whisper-cli printed no ${name} time:\n${stderr.slice(-1500)}`);
    return { ms: Number(m[1]), runs: Number(m[2] ?? 1) };
  };
  const encode = timing('encode');
  const decode = timing('decode');
  const batchd = timing('batchd');
  const prompt = timing('prompt');
  return {
    wallMs,
    melMs: timing('mel').ms,
    encodeMs: encode.ms,
    encodeRuns: encode.runs,
    decodeMs: decode.ms,
    decodeRuns: decode.runs,
    batchdMs: batchd.ms,
    batchdRuns: batchd.runs,
    promptMs: prompt.ms,
    promptRuns: prompt.runs,
    sampleMs: timing('sample').ms,
    totalMs: timing('total').ms,
    loadMs: timing('load').ms,
    fallbacks: /fallbacks =\s*(\d+ p \/\s*\d+ h)/.exec(stderr)?.[1] ?? '?',
    systemInfo: /system_info: (.*)/.exec(stderr)?.[1]?.trim() ?? '',
  };
}
