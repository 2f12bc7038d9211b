import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/**
 * llama.cpp's own tools on the same GGUF, for the speed reference: llama-bench
 * (pure generation, no HTTP) and llama-server (the OpenAI endpoint over HTTP).
 * Built from the llama.cpp source that node-llama-cpp bundles (see
 * bench/text.md); skipped when the binaries are not there.
 */

export function llamaBin(dir: string, name: string): string | undefined {
  const file = path.join(dir, name);
  return existsSync(file) ? file : undefined;
}

/** llama-bench tg<tokens> (generation only), tokens/s. */
export function llamaBenchTg(bin: string, model: string, threads: number, tokens: number): number {
  const out = execFileSync(bin, ['-m', model, '-t', String(threads), '-p', '0', '-n', String(tokens), '-r', '3', '-o', 'json'], { encoding: 'utf8', maxBuffer: 16 << 20 });
  const rows = JSON.parse(out) as Array<{ n_gen: number; avg_ts: number }>;
  return rows.find((r) => r.n_gen === tokens)?.avg_ts ?? Number.NaN;
}

export interface LlamaServer {
  url: string;
  stop(): Promise<void>;
}

/** llama-server on `model`; without `parallel` and `contextPerSlot`, with its own defaults for both (-np auto, -c the training context). */
export async function startLlamaServer(
  bin: string,
  model: string,
  options: { threads: number; parallel?: number; port: number; contextPerSlot?: number; args?: string[]; env?: NodeJS.ProcessEnv },
): Promise<LlamaServer> {
  const slots = options.parallel !== undefined && options.contextPerSlot !== undefined ? ['-np', String(options.parallel), '-c', String(options.contextPerSlot * options.parallel)] : [];
  const args = ['-m', model, '-t', String(options.threads), ...slots, '--host', '127.0.0.1', '--port', String(options.port), '--no-webui', ...(options.args ?? [])];
  const child: ChildProcess = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...options.env } });
  let log = '';
  child.stderr?.on('data', (d: Buffer) => {
    log = (log + d.toString()).slice(-4000);
  });
  const url = `http://127.0.0.1:${options.port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama-server exited: ${log}`);
    try {
      if ((await fetch(`${url}/health`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`llama-server did not start: ${log}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    url,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
