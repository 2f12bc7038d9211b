import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { writeFixtures } from '../../test/fixtures/index.js';
import type { Models } from './ops.js';

/**
 * `lserve` as the benchmarks run it: the built CLI (or src/ through tsx) in
 * a child process with a home of its own, the suite's fixtures registered as
 * a user would (`lserve pull <path> --kind`), `lserve serve` started on a
 * free loopback port and stopped with SIGTERM.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = path.join(ROOT, 'bin', 'lserve.js');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Server {
  child: ChildProcess;
  pid: number;
  base: string;
  logs: Array<{ at: number; line: string }>;
  exited?: { code: number | null; signal: NodeJS.Signals | null; at: number };
}

export interface LserveOptions {
  /** Run src/cli/main.ts through tsx instead of the built bin/lserve.js. */
  src?: boolean;
}

function lserveArgv(rest: string[], options: LserveOptions): string[] {
  return options.src ? ['--import', 'tsx', path.join(ROOT, 'src', 'cli', 'main.ts'), ...rest] : [BIN, ...rest];
}

function serverEnv(home: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, LSERVE_HOME: home, NO_COLOR: '1', ...extra };
  for (const name of ['LSERVE_HOST', 'LSERVE_PORT', 'LSERVE_API_KEY', 'LSERVE_CATALOG']) delete env[name];
  return env;
}

export function runLserve(home: string, rest: string[], options: LserveOptions = {}): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, lserveArgv(rest, options), { cwd: ROOT, env: serverEnv(home), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d));
    child.stderr.on('data', (d: Buffer) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** `lserve serve --host 127.0.0.1 --port 0 --log-format text <flags>`, resolved once it prints where it listens. */
export async function startLserve(home: string, flags: string[], extraEnv: NodeJS.ProcessEnv = {}, options: LserveOptions = {}): Promise<Server> {
  const argv = lserveArgv(['serve', '--host', '127.0.0.1', '--port', '0', '--log-format', 'text', ...flags], options);
  const child = spawn(process.execPath, argv, { cwd: ROOT, env: serverEnv(home, extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
  const server: Server = { child, pid: child.pid!, base: '', logs: [] };
  child.on('exit', (code, signal) => (server.exited = { code, signal, at: Date.now() }));
  const listening = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lserve serve did not report listening within 60 s:\n${server.logs.map((l) => l.line).join('\n')}`)), 60_000);
    child.on('exit', (code, signal) => reject(new Error(`lserve serve exited (${code ?? signal}) before listening:\n${server.logs.map((l) => l.line).join('\n')}`)));
    for (const stream of [child.stdout!, child.stderr!]) {
      let pending = '';
      stream.on('data', (d: Buffer) => {
        pending += d.toString('utf8');
        const lines = pending.split('\n');
        pending = lines.pop()!;
        for (const line of lines) {
          server.logs.push({ at: Date.now(), line });
          // Loopback only: the address the server printed must be 127.0.0.1.
          const m = /lserve listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(line);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        }
      });
    }
  });
  server.base = await listening;
  return server;
}

/** SIGTERM, then SIGKILL after `patienceMs`; how it ended and how long that took. */
export async function stopLserve(server: Server, patienceMs = 20_000): Promise<{ code: number | null; signal: string | null; ms: number }> {
  const t0 = performance.now();
  if (!server.exited) {
    server.child.kill('SIGTERM');
    const deadline = Date.now() + patienceMs;
    while (!server.exited && Date.now() < deadline) await sleep(100);
    if (!server.exited) {
      server.child.kill('SIGKILL');
      while (!server.exited) await sleep(50);
    }
  }
  return { code: server.exited!.code, signal: server.exited!.signal, ms: Math.round(performance.now() - t0) };
}

export type Fixture = Awaited<ReturnType<typeof writeFixtures>>[number];

/** Registers the fixtures into `home` as a user would (`lserve pull <path> --kind`); the models each route uses. */
export async function registerFixtures(home: string, fixtures: Fixture[], options: LserveOptions = {}): Promise<Models> {
  for (const f of fixtures) {
    const r = await runLserve(home, ['pull', f.path, '--kind', f.kind, '--quiet'], options);
    if (r.code !== 0) throw new Error(`lserve pull ${f.path} --kind ${f.kind} failed (${r.code}):\n${r.output}`);
  }
  const ids = new Set(fixtures.map((f) => path.basename(f.path).replace(/\.gguf$/, '')));
  const need = (id: string) => {
    if (!ids.has(id) && id !== 'ppocr-v4-mobile') throw new Error(`fixture '${id}' is missing: test/fixtures/index.ts changed?`);
    return id;
  };
  return {
    chat: need('synthetic-qwen3-chat'),
    embedding: [need('synthetic-bge-embedding'), need('synthetic-qwen3-embedding')],
    rerank: need('synthetic-bge-reranker'),
    ocr: [need('ppocr-v4-mobile'), need('synthetic-ppocr-v5')],
    asr: [need('synthetic-whisper-tiny'), need('synthetic-whisper-tiny-timestamped')],
    asrStream: need('synthetic-zipformer-streaming'),
    tts: [
      { model: need('synthetic-piper-voice'), fields: () => ({}) },
      { model: need('synthetic-qwen3-tts-customvoice'), fields: () => ({ voice: 'Vivian' }) },
      // Its talker and code predictor run on llama.cpp (converted at pull); the others keep their frame counter on ONNX Runtime.
      { model: need('synthetic-qwen3-tts-plain'), fields: () => ({ voice: 'Vivian' }) },
      { model: need('synthetic-qwen3-tts-voicedesign'), fields: () => ({ voice_description: 'a calm, low voice' }) },
      { model: need('synthetic-qwen3-tts-base'), fields: (inputs) => ({ ref_audio: `data:audio/wav;base64,${inputs.wav.toString('base64')}`, ref_text: 'hello world this is a test' }) },
    ],
    image: need('synthetic-sd-turbo'),
    vae: need('synthetic-taesd'),
  };
}
