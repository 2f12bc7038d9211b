import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Engine, type EngineOptions, type Isolation } from '../../src/compose.js';
import { startServer, type RunningServer } from '../../src/http/server.js';
import type { ServerOptions } from '../../src/http/context.js';

export interface TestServer extends RunningServer {
  engine: Engine;
  home: string;
  logs: string[];
  /** Closes the server and removes its temporary home. */
  stop(): Promise<void>;
}

/** A real server on an ephemeral loopback port with a fresh, empty model store. */
export async function startTestServer(
  options: { engine?: Partial<EngineOptions> & { isolation?: Isolation }; server?: Partial<ServerOptions>; home?: string } = {},
): Promise<TestServer> {
  const home = options.home ?? (await mkdtemp(path.join(os.tmpdir(), 'lserve-test-')));
  const logs: string[] = [];
  const log = (m: string) => logs.push(m);
  const engine = new Engine({ home, log, ...options.engine });
  const server = await startServer(engine, {
    host: '127.0.0.1',
    port: 0,
    cors: false,
    maxBodyBytes: 8 * 1024 * 1024,
    maxUploadBytes: 32 * 1024 * 1024,
    logFormat: 'text',
    log,
    ...options.server,
  });
  return {
    ...server,
    engine,
    home,
    logs,
    async stop() {
      await server.close();
      if (!options.home) await rm(home, { recursive: true, force: true });
    },
  };
}

export async function tempHome(): Promise<string> {
  return mkdtemp(path.join(os.tmpdir(), 'lserve-home-'));
}
