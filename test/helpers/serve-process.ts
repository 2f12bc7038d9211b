import { spawn, type ChildProcess } from 'node:child_process';
import { BIN } from './cli.js';

export interface ServeProcess {
  child: ChildProcess;
  /** The server's base URL (no /v1). */
  url: string;
  /** The exit code, or null when a signal ended it. */
  exited: Promise<number | null>;
  /** Everything it wrote to stderr so far. */
  log(): string;
}

/**
 * `lserve serve` as a separate process on a free port with LSERVE_HOME `home`,
 * for tests that signal the server itself (SIGTERM, SIGKILL), which an
 * in-process server cannot take, or that run it as a user does (flags and
 * environment variables, several replicas).
 */
export async function spawnServe(home: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const child = spawn(process.execPath, [BIN, 'serve', '--port', '0', ...args], {
    env: { ...process.env, LSERVE_HOME: home, NO_COLOR: '1', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const found = /lserve listening on (http:\/\/\S+)\/v1/.exec(output)?.[1];
      if (found) resolve(found);
    });
    void exited.then((code) => reject(new Error(`lserve serve exited (${code}):\n${output}`)));
  });
  return { child, url, exited, log: () => output };
}
