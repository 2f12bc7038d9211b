import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { SpeechJobRecord, StateStore, StateStoreOptions } from '../../src/core/state/store.js';
import { NEEDS_POSTGRES, postgresAvailable } from '../helpers/postgres.js';
import { entry, ids, postgresBackend, sqliteBackend, type Backend } from '../helpers/state-backends.js';

/**
 * The state store's contract, run against SQLite always and PostgreSQL where
 * a server can be had: stored responses (round trips, chains, paging,
 * expiry, retention, the size bound), speech stream jobs (single-use claims,
 * expiry, the bound on pending jobs), and two stores on one database standing
 * for two replicas: what one writes the other reads, concurrent claims of one
 * job have exactly one winner, and both may start (and migrate) at once.
 * Failures (a database outage, a writer killed mid-transaction) are in
 * state-store-failures.test.ts.
 */

const TOKEN = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

function contract(backend: Backend): void {
  let clock: number;
  const stores: StateStore[] = [];
  const open = async (options: Partial<StateStoreOptions> = {}) => {
    const store = await backend.open({ ttlSeconds: 3600, maxResponses: 100, maxBytesPerResponse: 1_000_000, maxPendingSpeechJobs: 4, now: () => clock, ...options });
    stores.push(store);
    return store;
  };
  const job = (n: number, ttlMs = 60_000): SpeechJobRecord => ({ token: TOKEN(n), model: 'piper-test', request: { input: `job ${n}`, voice: 'lessac', speed: 1.5 }, expiresAt: clock + ttlMs });

  beforeAll(() => backend.setUp());
  afterAll(() => backend.tearDown());
  beforeEach(async () => {
    clock = 1_700_000_000_000;
    await backend.fresh();
  });
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((store) => store.close()));
  });

  describe('stored responses', () => {
    it('stores, returns, replaces and deletes a response with its items', async () => {
      const { responses } = await open();
      await responses.put(entry('resp_1', { inputs: 3, outputs: 2 }));
      await responses.put(entry('resp_2'));
      expect(await responses.get('resp_1')).toEqual(entry('resp_1', { inputs: 3, outputs: 2 }));
      await responses.put(entry('resp_1', { inputs: 1 }));
      expect(await responses.get('resp_1')).toEqual(entry('resp_1', { inputs: 1 }));
      expect(await backend.count('SELECT count(*) FROM items')).toBe(5);

      expect(await responses.delete('resp_1')).toBe(true);
      expect(await responses.get('resp_1')).toBeUndefined();
      expect(await responses.inputItems('resp_1', { limit: 20, order: 'asc' })).toBeUndefined();
      expect(await responses.conversation('resp_1')).toBeUndefined();
      expect(await responses.delete('resp_1')).toBe(false);
      expect(await backend.count('SELECT count(*) FROM items')).toBe(3);
      expect(await responses.get('resp_2')).toEqual(entry('resp_2'));
    });

    it('reads a chain oldest first, ending at a deleted link', async () => {
      const { responses } = await open();
      await responses.put(entry('resp_1'));
      await responses.put(entry('resp_2', { previous: 'resp_1', inputs: 1 }));
      await responses.put(entry('resp_3', { previous: 'resp_2', inputs: 1, outputs: 2 }));
      await responses.put(entry('resp_4', { previous: 'resp_3', inputs: 0, outputs: 0 }));
      expect(ids(await responses.conversation('resp_4'))).toEqual(['resp_1_in_0', 'resp_1_in_1', 'resp_1_out_0', 'resp_2_in_0', 'resp_2_out_0', 'resp_3_in_0', 'resp_3_out_0', 'resp_3_out_1']);
      expect(await responses.conversation('resp_1')).toEqual([...entry('resp_1').input, ...entry('resp_1').output]);
      expect(await responses.conversation('resp_unknown')).toBeUndefined();
      await responses.delete('resp_2');
      expect(ids(await responses.conversation('resp_3'))).toEqual(['resp_3_in_0', 'resp_3_out_0', 'resp_3_out_1']);
    });

    it('stops a chain that loops back on itself', async () => {
      const { responses } = await open();
      await responses.put(entry('resp_a', { previous: 'resp_b', inputs: 1, outputs: 0 }));
      await responses.put(entry('resp_b', { previous: 'resp_a', inputs: 1, outputs: 0 }));
      expect(ids(await responses.conversation('resp_b'))).toEqual(['resp_a_in_0', 'resp_b_in_0']);
    });

    it('pages input items both ways with after, limit and has_more; a bad limit or after is a 400', async () => {
      const { responses } = await open();
      await responses.put(entry('resp_1', { inputs: 7, outputs: 3 }));
      const item = (i: number) => `resp_1_in_${i}`;
      const page = async (after: string | undefined, limit: number, order: 'asc' | 'desc') => {
        const result = (await responses.inputItems('resp_1', { after, limit, order }))!;
        return { ...result, data: ids(result.data) };
      };
      expect(await page(undefined, 3, 'asc')).toEqual({ data: [0, 1, 2].map(item), firstId: item(0), lastId: item(2), hasMore: true });
      expect(await page(item(2), 3, 'asc')).toEqual({ data: [3, 4, 5].map(item), firstId: item(3), lastId: item(5), hasMore: true });
      expect(await page(item(5), 3, 'asc')).toEqual({ data: [item(6)], firstId: item(6), lastId: item(6), hasMore: false });
      expect(await page(item(6), 3, 'asc')).toEqual({ data: [], firstId: null, lastId: null, hasMore: false });
      expect(await page(undefined, 3, 'desc')).toEqual({ data: [6, 5, 4].map(item), firstId: item(6), lastId: item(4), hasMore: true });
      expect(await page(item(1), 3, 'desc')).toEqual({ data: [item(0)], firstId: item(0), lastId: item(0), hasMore: false });
      expect((await responses.inputItems('resp_1', { limit: 100, order: 'asc' }))!.data).toEqual(entry('resp_1', { inputs: 7, outputs: 3 }).input);
      for (const limit of [0, 101, 1.5]) {
        await expect(responses.inputItems('resp_1', { limit, order: 'asc' }), String(limit)).rejects.toMatchObject({ status: 400, param: 'limit' });
      }
      await expect(responses.inputItems('resp_1', { after: 'resp_1_out_0', limit: 10, order: 'asc' })).rejects.toMatchObject({ status: 400, param: 'after' });
    });

    it('expires a response ttlSeconds after it was stored, and deletes it on a later put', async () => {
      const { responses } = await open({ ttlSeconds: 60 });
      await responses.put(entry('resp_1'));
      clock += 30_000;
      await responses.put(entry('resp_2', { previous: 'resp_1' }));
      clock += 29_999;
      expect(await responses.get('resp_1')).toBeDefined();
      clock += 1;
      expect(await responses.get('resp_1')).toBeUndefined();
      expect(await responses.inputItems('resp_1', { limit: 20, order: 'asc' })).toBeUndefined();
      expect(await responses.delete('resp_1')).toBe(false);
      expect(ids(await responses.conversation('resp_2'))).toEqual(['resp_2_in_0', 'resp_2_in_1', 'resp_2_out_0']);
      expect(await backend.count('SELECT count(*) FROM responses')).toBe(2);
      await responses.put(entry('resp_3'));
      expect(await backend.count('SELECT count(*) FROM responses')).toBe(2);
      expect(await backend.count('SELECT count(*) FROM items')).toBe(6);
    });

    it('deletes expired responses when a store opens', async () => {
      await (await open({ ttlSeconds: 60 })).responses.put(entry('resp_1'));
      clock += 60_000;
      await open({ ttlSeconds: 60 });
      expect(await backend.count('SELECT count(*) FROM responses')).toBe(0);
      expect(await backend.count('SELECT count(*) FROM items')).toBe(0);
    });

    it('keeps the newest maxResponses responses', async () => {
      const { responses } = await open({ maxResponses: 3 });
      for (let i = 1; i <= 5; i++) {
        await responses.put(entry(`resp_${i}`));
        clock += 1;
      }
      const kept = async (...names: string[]) => Promise.all(names.map(async (id) => (await responses.get(id)) !== undefined));
      expect(await kept('resp_1', 'resp_2', 'resp_3', 'resp_4', 'resp_5')).toEqual([false, false, true, true, true]);
      expect(await backend.count('SELECT count(*) FROM items')).toBe(9);
      await responses.delete('resp_4');
      await responses.put(entry('resp_6'));
      expect(await kept('resp_3', 'resp_5', 'resp_6')).toEqual([true, true, true]);
      await responses.put(entry('resp_7'));
      expect(await kept('resp_3')).toEqual([false]);
    });

    it('refuses a response larger than maxBytesPerResponse with a 400 on `store`, storing nothing', async () => {
      const big = entry('resp_big', { inputs: 10 });
      const size = [big.response, ...big.input, ...big.output].reduce<number>((sum, part) => sum + Buffer.byteLength(JSON.stringify(part)), 0);
      const { responses } = await open({ maxBytesPerResponse: size - 1 });
      await expect(responses.put(big)).rejects.toMatchObject({ status: 400, param: 'store', message: expect.stringContaining(`${size} bytes`) });
      expect(await backend.count('SELECT count(*) FROM responses')).toBe(0);
    });
  });

  describe('speech stream jobs', () => {
    it('hands a job out once, as it was stored', async () => {
      const { speechJobs } = await open();
      await speechJobs.create(job(1));
      expect(await speechJobs.unclaimed([TOKEN(1), TOKEN(2)])).toEqual(new Set([TOKEN(1)]));
      expect(await speechJobs.claim(TOKEN(1))).toEqual(job(1));
      expect(await speechJobs.claim(TOKEN(1))).toBeUndefined();
      expect(await speechJobs.unclaimed([TOKEN(1)])).toEqual(new Set());
      expect(await speechJobs.claim(TOKEN(2))).toBeUndefined();
      expect(await speechJobs.claim('not-a-uuid')).toBeUndefined();
    });

    it('never hands out an expired job, and sweeps it', async () => {
      const { speechJobs } = await open();
      await speechJobs.create(job(1, 1000));
      await speechJobs.create(job(2, 5000));
      clock += 1000;
      expect(await speechJobs.claim(TOKEN(1))).toBeUndefined();
      expect(await speechJobs.unclaimed([TOKEN(1), TOKEN(2)])).toEqual(new Set([TOKEN(2)]));
      expect(await backend.count('SELECT count(*) FROM speech_jobs')).toBe(2);
      expect(await speechJobs.sweep()).toBe(1);
      expect(await backend.count('SELECT count(*) FROM speech_jobs')).toBe(1);
      expect((await speechJobs.claim(TOKEN(2)))?.token).toBe(TOKEN(2));
    });

    it('refuses more pending jobs than its bound with a 503; claimed and expired ones free their place', async () => {
      const { speechJobs } = await open({ maxPendingSpeechJobs: 2 });
      await speechJobs.create(job(1, 1000));
      await speechJobs.create(job(2));
      await expect(speechJobs.create(job(3))).rejects.toMatchObject({ status: 503, type: 'overloaded_error' });
      await speechJobs.claim(TOKEN(2));
      await speechJobs.create(job(3));
      await expect(speechJobs.create(job(4))).rejects.toMatchObject({ status: 503 });
      clock += 1000;
      await speechJobs.create(job(4));
      expect(await backend.count('SELECT count(*) FROM speech_jobs')).toBe(2);
    });
  });

  describe('two stores on one database (two replicas)', () => {
    it('start together, migrating once', async () => {
      const [a, b] = await Promise.all([open(), open()]);
      if (backend.name === 'postgres') expect(await backend.count('SELECT count(*) FROM lserve_schema_migrations')).toBe(2);
      await a.responses.put(entry('resp_1'));
      await b.responses.put(entry('resp_2', { previous: 'resp_1' }));
      expect(ids(await a.responses.conversation('resp_2'))).toHaveLength(6);
      expect(await b.responses.get('resp_1')).toEqual(entry('resp_1'));
      // And again over the migrated database: nothing to do.
      await Promise.all([open(), open()]);
      if (backend.name === 'postgres') expect(await backend.count('SELECT count(*) FROM lserve_schema_migrations')).toBe(2);
    });

    it('hand each of many jobs to exactly one of two racing claims', async () => {
      const [a, b] = await Promise.all([open({ maxPendingSpeechJobs: 100 }), open({ maxPendingSpeechJobs: 100 })]);
      const count = 40;
      await Promise.all(Array.from({ length: count }, (_, n) => (n % 2 ? a : b).speechJobs.create(job(n))));
      const claims = await Promise.all(Array.from({ length: count }, (_, n) => Promise.all([a.speechJobs.claim(TOKEN(n)), b.speechJobs.claim(TOKEN(n))])));
      for (const [n, pair] of claims.entries()) {
        expect(pair.filter(Boolean), TOKEN(n)).toEqual([job(n)]);
      }
      expect(await backend.count('SELECT count(*) FROM speech_jobs')).toBe(0);
    });

    it('keep the bound on pending jobs over both', async () => {
      const [a, b] = await Promise.all([open({ maxPendingSpeechJobs: 5 }), open({ maxPendingSpeechJobs: 5 })]);
      const results = await Promise.allSettled(Array.from({ length: 12 }, (_, n) => (n % 2 ? a : b).speechJobs.create(job(n))));
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
      for (const result of results.filter((r) => r.status === 'rejected')) expect(result.reason).toMatchObject({ status: 503 });
    });
  });
}

describe('SQLite state store', () => contract(sqliteBackend()));
describe.skipIf(!postgresAvailable)(`PostgreSQL state store (${NEEDS_POSTGRES})`, () => contract(postgresBackend()));
