/**
 * The image benchmark's figures through the HTTP API (not a test): `lserve
 * serve` on the home bench/images.ts prepared (the SD-Turbo-sized synthetic
 * export, its fp32 conversion and int8 graphs), once with
 * LSERVE_IMAGE_PRECISION=fp32 and once as installed, each server started
 * fresh: a warm-up request (the load), then REPS `POST /v1/images/generations`
 * at 512×512, 1 step, guidance 0 (full VAE), then REPS with
 * `quality: "low"` (TAESD), timed at the client; then `GET /v1/ps` for the
 * runner's peak RSS (`peak_rss_bytes`). Run bench/images.ts first; the
 * built CLI (`npm run build`) is what serves.
 *
 *   npx tsx bench/images/http.ts [--reps 3] [--threads 2]
 */
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { RunningModelList } from '../../src/api/ps.js';
import { startLserve, stopLserve } from '../load/lserve.js';

const { values: args } = parseArgs({ options: { reps: { type: 'string', default: '3' }, threads: { type: 'string', default: '2' } } });
const HOME = fileURLToPath(new URL('../.cache/images-home-fp32', import.meta.url));
const reps = Number(args.reps);

async function generate(base: string, extra: Record<string, unknown>): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${base}/v1/images/generations`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sd-bench', prompt: 'a lighthouse on a cliff at dusk, oil painting', size: '512x512', steps: 1, guidance_scale: 0, seed: 1, response_format: 'b64_json', ...extra }),
  });
  const body = (await res.json()) as { data?: unknown[] };
  if (!res.ok || !body.data?.length) throw new Error(`images answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`);
  return (performance.now() - started) / 1000;
}

async function variant(precision: 'fp32' | 'installed'): Promise<void> {
  const env = precision === 'fp32' ? { LSERVE_IMAGE_PRECISION: 'fp32' } : {};
  const server = await startLserve(HOME, ['--threads', args.threads, '--keep-alive', '-1'], env);
  try {
    const load = await generate(server.base, {});
    const full: number[] = [];
    const low: number[] = [];
    for (let i = 0; i < reps; i++) full.push(await generate(server.base, {}));
    for (let i = 0; i < reps; i++) low.push(await generate(server.base, { quality: 'low' }));
    const ps = (await (await fetch(`${server.base}/v1/ps`)).json()) as RunningModelList;
    const model = ps.models.find((m) => m.id === 'sd-bench');
    const line = server.logs.find((l) => /^sd-bench: (text encoder|UNet)/.test(l.line))?.line ?? '';
    const s = (v: number[]) => `${Math.min(...v).toFixed(2)} s (${v.map((x) => x.toFixed(2)).join(' / ')})`;
    console.log(`${precision}: load + first image ${load.toFixed(1)} s; full VAE ${s(full)}; quality low (TAESD) ${s(low)}; runner peak RSS ${((model?.peak_rss_bytes ?? 0) / 1e9).toFixed(2)} GB, estimate ${((model?.memory_bytes ?? 0) / 1e9).toFixed(2)} GB`);
    if (line) console.log(`  ${line}`);
  } finally {
    await stopLserve(server);
  }
}

console.log(`lserve images over HTTP: ${path.relative(process.cwd(), HOME)}, 512x512, 1 step, guidance 0, ${args.threads} threads, ${os.cpus()[0]?.model ?? 'cpu'} ×${os.availableParallelism()}, load average ${os.loadavg().map((v) => v.toFixed(2)).join(', ')}`);
await variant('fp32');
await variant('installed');
console.log(`load average at end: ${os.loadavg().map((v) => v.toFixed(2)).join(', ')}`);
