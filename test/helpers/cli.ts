import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const BIN = fileURLToPath(new URL('../../bin/lserve.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  /** stdout as bytes, for binary output (audio written to `-o -`), which `stdout` would decode as UTF-8. */
  stdoutBytes: Buffer;
  stderr: string;
}

/** Runs the built CLI (bin/lserve.js) as a user would, with piped stdio. */
export function runCli(args: string[], options: { env?: NodeJS.ProcessEnv; input?: string | Buffer; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      env: { ...process.env, NO_COLOR: '1', ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const stdout: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => stdout.push(d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const bytes = Buffer.concat(stdout);
      resolve({ code, stdout: bytes.toString('utf8'), stdoutBytes: bytes, stderr });
    });
    child.stdin.end(options.input ?? '');
  });
}
