/**
 * `lserve pull` throughput against a local hub mirror (127.0.0.1), side by
 * side with a bare fetch → file copy of the same bytes from the same server
 * (no hashing, no progress), so the ratio shows what pull's own work costs.
 *
 *   npx tsx bench/pull.ts [sizeMB=200] [--tty]
 *
 * --tty runs the CLI under `script` so the cli-progress bars are drawn.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { fileURLToPath } from 'node:url';
import { startMirror, writeCatalog } from '../test/helpers/hf-mirror.js';

const sizeMb = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 200);
const tty = process.argv.includes('--tty');
const bin = fileURLToPath(new URL('../bin/lserve.js', import.meta.url));

const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-pull-'));
const mirror = await startMirror();
try {
  const source = path.join(dir, 'weights.bin');
  const sha256 = await writeRandomFile(source, sizeMb * 1024 * 1024);
  await mirror.putFile('bench/model', 'weights.bin', source, sha256, { linkedEtag: true, redirect: true });
  const catalog = await writeCatalog(dir, [
    { id: 'bench', kind: 'chat', backend: 'llama', description: 'bench', owned_by: 'bench', license: 'mit', files: { model: { repo: 'bench/model', path: 'weights.bin' } } },
  ]);
  const bytes = sizeMb * 1024 * 1024;

  const baseline = await timed(async () => {
    const response = await fetch(`${mirror.endpoint}/cdn/bench/model/resolve/main/weights.bin`);
    await pipeline(Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>), createWriteStream(path.join(dir, 'baseline.bin')));
  });
  await rm(path.join(dir, 'baseline.bin'));

  const home = path.join(dir, 'home');
  const command = [process.execPath, bin, '--home', home, '--catalog', catalog, 'pull', 'bench'];
  const pull = await timed(() => run(tty ? ['script', '-qec', command.join(' '), '/dev/null'] : command, { HF_ENDPOINT: mirror.endpoint }));

  const mbps = (s: number) => (bytes / 1024 / 1024 / s).toFixed(0);
  console.log(`file: ${sizeMb} MB (sha256 verified via x-linked-etag), mode: ${tty ? 'tty bars' : 'plain lines'}`);
  console.log(`bare fetch → file : ${baseline.toFixed(2)} s  ${mbps(baseline)} MB/s`);
  console.log(`lserve pull (CLI) : ${pull.toFixed(2)} s  ${mbps(pull)} MB/s  (includes node startup)`);
  console.log(`ratio pull / bare : ${(pull / baseline).toFixed(2)}`);
} finally {
  await mirror.close();
  await rm(dir, { recursive: true, force: true });
}

async function timed(fn: () => Promise<void>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e9;
}

/** Async spawn: the mirror serves from this process's event loop. */
function run(argv: string[], env: Record<string, string>): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let tail = '';
    child.stdout.on('data', (d: Buffer) => (tail = (tail + d.toString()).slice(-600)));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`pull exited ${code}: ${tail}`))));
    child.on('exit', () => process.stderr.write(tail.split('\n').filter((l) => l.startsWith('Pulled') || l.startsWith('Downloaded')).join('\n') + '\n'));
  });
}

async function writeRandomFile(file: string, size: number): Promise<string> {
  const hash = createHash('sha256');
  const out = createWriteStream(file);
  const chunk = 4 * 1024 * 1024;
  for (let written = 0; written < size; written += chunk) {
    const block = randomBytes(Math.min(chunk, size - written));
    hash.update(block);
    if (!out.write(block)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  return hash.digest('hex');
}
