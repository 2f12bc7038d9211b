import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { runCli } from '../helpers/cli.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';
import { tempHome } from '../helpers/server.js';

/**
 * Two `lserve serve` replicas with homes of their own and one files
 * directory (one given --files-dir, the other LSERVE_FILES_DIR), as behind
 * a round-robin load balancer: a file generated through one is served by
 * the other, by byte range too, with the same validators, and a file gone
 * from the directory is gone for both.
 */

let shared: string;
const homes: string[] = [];
let a: ServeProcess;
let b: ServeProcess;

beforeAll(async () => {
  shared = await mkdtemp(path.join(os.tmpdir(), 'lserve-files-'));
  for (let i = 0; i < 2; i++) homes.push(await tempHome());
  const pulled = await runCli(['pull', await syntheticPiperVoice(), '--kind', 'tts', '--id', 'piper-test'], { env: { LSERVE_HOME: homes[0] } });
  expect(pulled.code, pulled.stderr).toBe(0);
  a = await spawnServe(homes[0]!, ['--files-dir', shared]);
  b = await spawnServe(homes[1]!, [], { LSERVE_FILES_DIR: shared });
});

afterAll(async () => {
  for (const server of [a, b]) {
    server?.child.kill('SIGTERM');
    await server?.exited;
  }
  for (const dir of [shared, ...homes]) if (dir) await rm(dir, { recursive: true, force: true });
});

it('serves a file written through one replica from the other, whole and by range, with the same validators', async () => {
  const res = await fetch(`${a.url}/v1/audio/speech`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'piper-test', input: 'The quick brown fox jumps over the lazy dog.', voice: 'lessac' }),
  });
  expect(res.status).toBe(200);
  const { audio_url } = (await res.json()) as { audio_url: string };
  const name = audio_url.slice(audio_url.lastIndexOf('/') + 1);
  const bytes = await readFile(path.join(shared, 'audio', name));
  // Nothing under either home: the files directory is the only place.
  for (const home of homes) expect(await readdir(path.join(home, 'cache')).catch(() => [])).toEqual([]);

  const fromA = await fetch(`${a.url}${audio_url}`, { method: 'HEAD' });
  const whole = await fetch(`${b.url}${audio_url}`);
  expect(whole.status).toBe(200);
  expect(whole.headers.get('content-type')).toBe('audio/wav');
  expect(Buffer.from(await whole.arrayBuffer()).equals(bytes)).toBe(true);
  expect(whole.headers.get('etag')).toBe(fromA.headers.get('etag'));
  expect(whole.headers.get('last-modified')).toBe(fromA.headers.get('last-modified'));

  const ranged = await fetch(`${b.url}${audio_url}`, { headers: { range: 'bytes=100-1099' } });
  expect(ranged.status).toBe(206);
  expect(ranged.headers.get('content-range')).toBe(`bytes 100-1099/${bytes.length}`);
  expect(Buffer.from(await ranged.arrayBuffer()).equals(bytes.subarray(100, 1100))).toBe(true);
  const revalidated = await fetch(`${b.url}${audio_url}`, { headers: { 'cache-control': 'max-age=0', 'if-none-match': fromA.headers.get('etag')! } });
  expect(revalidated.status).toBe(304);

  await rm(path.join(shared, 'audio', name));
  for (const server of [a, b]) expect((await fetch(`${server.url}${audio_url}`)).status).toBe(404);
});
