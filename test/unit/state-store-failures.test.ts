import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UnavailableError } from '../../src/core/errors.js';
import { PgStateStore } from '../../src/core/state/postgres/index.js';
import type { StateStore, StateStoreOptions } from '../../src/core/state/store.js';
import { NEEDS_POSTGRES, postgresAvailable } from '../helpers/postgres.js';
import { entry, postgresBackend, sqliteBackend, type Backend } from '../helpers/state-backends.js';

/**
 * The state store when things go wrong: a writer killed in the middle of a
 * put's transaction (both backends) leaves nothing of that response, and
 * holds no lock afterwards; a PostgreSQL server that stops answers every
 * operation with a 503 — no crash, the password never logged — and the same
 * store serves again once it is back.
 */

const WRITER = fileURLToPath(new URL('../helpers/state-writer.ts', import.meta.url));
const OPTIONS: StateStoreOptions = { ttlSeconds: Infinity, maxResponses: 1000, maxBytesPerResponse: 64 * 1024 * 1024, maxPendingSpeechJobs: 10 };

/** Runs the writer on `location` until it stops inside its second put, then SIGKILLs it. */
async function killMidPut(backend: Backend, location: string): Promise<void> {
  const child = spawn(process.execPath, ['--import', 'tsx', WRITER, backend.name, location], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (data: Buffer) => {
      output += data;
      if (output.includes('mid-put\n')) resolve();
    });
    child.stderr.on('data', (data: Buffer) => (output += data));
    void exited.then(() => reject(new Error(`the writer exited before it was killed:\n${output}`)));
  });
  expect(output).toBe('stored\nmid-put\n');
  child.kill('SIGKILL');
  await exited;
}

function crashContract(backend: Backend): void {
  const stores: StateStore[] = [];
  beforeAll(() => backend.setUp());
  afterAll(() => backend.tearDown());
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((store) => store.close()));
  });

  it('a writer killed in the middle of a put leaves nothing of that response, and no lock', { timeout: 60_000 }, async () => {
    await killMidPut(backend, await backend.fresh());
    const store = await backend.open(OPTIONS);
    stores.push(store);
    expect((await store.responses.get('resp_whole'))?.input).toHaveLength(20);
    expect(await store.responses.get('resp_torn')).toBeUndefined();
    expect(await backend.count('SELECT count(*) FROM responses WHERE id = ?', 'resp_torn')).toBe(0);
    expect(await backend.count('SELECT count(*) FROM items WHERE response_id = ?', 'resp_torn')).toBe(0);
    expect(await backend.count('SELECT count(*) FROM items')).toBe(25);
    // What the killed transaction held (SQLite's write lock, PostgreSQL's advisory lock) went with it.
    await store.responses.put(entry('resp_torn'));
    expect(await store.responses.get('resp_torn')).toEqual(entry('resp_torn'));
  });
}

describe('SQLite state store, a writer killed mid-transaction', () => crashContract(sqliteBackend()));

describe.skipIf(!postgresAvailable)(`PostgreSQL state store, failures (${NEEDS_POSTGRES})`, () => {
  const backend = postgresBackend();
  crashContract(backend);

  it('answers 503 while the server is down, crashes nothing, logs no password, and serves again once it is back', async ({ skip }) => {
    if (!backend.server?.stop) skip('the server of LSERVE_TEST_DATABASE_URL is not ours to stop');
    const url = new URL(await backend.fresh());
    // Trust authentication takes any password: this one must never be logged.
    url.password = 'hunter2-secret';
    const logged: string[] = [];
    const store = await PgStateStore.open(url.toString(), { ...OPTIONS, log: (message) => logged.push(message) });
    try {
      await store.responses.put(entry('resp_1'));
      // Several connections in the pool, idle: the server's shutdown ends them under the pool.
      await Promise.all(Array.from({ length: 5 }, () => store.responses.get('resp_1')));
      await backend.server!.stop!();

      const operations: Array<[string, () => Promise<unknown>]> = [
        ['get', () => store.responses.get('resp_1')],
        ['put', () => store.responses.put(entry('resp_2'))],
        ['delete', () => store.responses.delete('resp_1')],
        ['inputItems', () => store.responses.inputItems('resp_1', { limit: 10, order: 'asc' })],
        ['conversation', () => store.responses.conversation('resp_1')],
        ['create', () => store.speechJobs.create({ token: '00000000-0000-4000-8000-000000000001', model: 'm', request: {}, expiresAt: Date.now() + 60_000 })],
        ['claim', () => store.speechJobs.claim('00000000-0000-4000-8000-000000000001')],
        ['unclaimed', () => store.speechJobs.unclaimed(['00000000-0000-4000-8000-000000000001'])],
        ['sweep', () => store.speechJobs.sweep()],
        ['ping', () => store.ping()],
      ];
      for (const [name, operation] of operations) {
        const error = await operation().then(
          () => undefined,
          (caught: unknown) => caught,
        );
        expect(error, name).toBeInstanceOf(UnavailableError);
        expect(error, name).toMatchObject({ status: 503, code: 'database_unavailable', retryAfterSeconds: 2 });
      }
      expect(logged).toHaveLength(1);
      expect(logged[0]).toMatch(/^The PostgreSQL state database is unreachable \(.*ECONNREFUSED.*\)/);

      await backend.server!.start!();
      expect(await store.responses.get('resp_1')).toEqual(entry('resp_1'));
      await store.responses.put(entry('resp_2', { previous: 'resp_1' }));
      expect(await store.responses.conversation('resp_2')).toHaveLength(6);
      expect(logged).toEqual([logged[0], 'The PostgreSQL state database is reachable again.']);
      expect(logged.join('\n')).not.toContain('hunter2');
    } finally {
      await store.close();
    }
  });

  it('tries a read again when the pooled connections were cut under it, and calls that no outage', async () => {
    const url = await backend.fresh();
    const logged: string[] = [];
    const store = await PgStateStore.open(url, { ...OPTIONS, log: (message) => logged.push(message) });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await store.responses.put(entry('resp_1'));
      for (let round = 0; round < 5; round++) {
        await Promise.all(Array.from({ length: 4 }, () => store.responses.get('resp_1')));
        // The pool's connections end (as a restart or a proxy would end them) and a read follows at once.
        await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'lserve' AND pid <> pg_backend_pid()");
        expect(await store.responses.get('resp_1'), `round ${round}`).toEqual(entry('resp_1'));
      }
      expect(logged).toEqual([]);
    } finally {
      await admin.end();
      await store.close();
    }
  });
});
