import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/core/errors.js';
import { ResponseStore, type ResponseStoreOptions } from '../../src/core/state/sqlite/responses.js';
import { entry } from '../helpers/state-backends.js';

/**
 * The stored responses of the Responses API, on real SQLite files in a
 * temporary directory: round trips, retention, paging, conversation chains,
 * restarts, a damaged file, and writers killed in the middle of a put.
 */

const WRITER = fileURLToPath(new URL('../helpers/response-writer.ts', import.meta.url));


const ids = (items: unknown[] | undefined) => items?.map((item) => (item as { id: string }).id);

describe('ResponseStore', () => {
  let dir: string;
  let file: string;
  let clock: number;
  const stores: ResponseStore[] = [];
  const open = (options: Partial<ResponseStoreOptions> = {}) => {
    const store = ResponseStore.open(file, { ttlSeconds: 3600, maxResponses: 100, maxBytesPerResponse: 1_000_000, now: () => clock, ...options });
    stores.push(store);
    return store;
  };
  /** The database as SQLite itself reads it, beside the store. */
  const raw = () => new Database(file, { readonly: true });
  const rowCounts = () => {
    const db = raw();
    try {
      return db.prepare<[], { responses: number; items: number }>('SELECT (SELECT count(*) FROM responses) AS responses, (SELECT count(*) FROM items) AS items').get()!;
    } finally {
      db.close();
    }
  };

  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-responses-'));
    file = path.join(dir, 'home', 'responses.db');
    clock = 1_700_000_000_000;
  });
  afterEach(async () => {
    for (const store of stores.splice(0)) store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('stores, returns and deletes a response with its items', () => {
    const store = open();
    const one = entry('resp_1', { inputs: 3, outputs: 2 });
    store.put(one);
    store.put(entry('resp_2'));
    expect(store.get('resp_1')).toEqual(one);
    expect(rowCounts()).toEqual({ responses: 2, items: 8 });

    expect(store.delete('resp_1')).toBe(true);
    expect(store.get('resp_1')).toBeUndefined();
    expect(store.inputItems('resp_1', { limit: 20, order: 'asc' })).toBeUndefined();
    expect(store.conversation('resp_1')).toBeUndefined();
    expect(store.delete('resp_1')).toBe(false);
    // Its items went with it; the other response is untouched.
    expect(rowCounts()).toEqual({ responses: 1, items: 3 });
    expect(store.get('resp_2')).toEqual(entry('resp_2'));
  });

  it('replaces a response stored again under the same id', () => {
    const store = open();
    store.put(entry('resp_1', { inputs: 4 }));
    store.put(entry('resp_1', { inputs: 1 }));
    expect(store.get('resp_1')).toEqual(entry('resp_1', { inputs: 1 }));
    expect(rowCounts()).toEqual({ responses: 1, items: 2 });
  });

  it('creates its directory, and its files readable by the owner only', () => {
    const store = open();
    store.put(entry('resp_1'));
    expect(statSync(path.dirname(file)).mode & 0o777).toBe(0o700);
    for (const name of readdirSync(path.dirname(file))) {
      expect([name, statSync(path.join(path.dirname(file), name)).mode & 0o777]).toEqual([name, 0o600]);
    }
    // WAL mode: the write went to responses.db-wal.
    expect(existsSync(`${file}-wal`)).toBe(true);
  });

  it('expires a response ttlSeconds after it was stored, and deletes it on a later put', () => {
    const store = open({ ttlSeconds: 60 });
    store.put(entry('resp_1'));
    clock += 30_000;
    store.put(entry('resp_2', { previous: 'resp_1' }));
    clock += 29_999;
    expect(store.get('resp_1')).toBeDefined();
    clock += 1;
    expect(store.get('resp_1')).toBeUndefined();
    expect(store.inputItems('resp_1', { limit: 20, order: 'asc' })).toBeUndefined();
    expect(store.delete('resp_1')).toBe(false);
    // The chain ends at the expired link.
    expect(ids(store.conversation('resp_2'))).toEqual(['resp_2_in_0', 'resp_2_in_1', 'resp_2_out_0']);
    expect(rowCounts().responses).toBe(2);

    store.put(entry('resp_3'));
    expect(rowCounts()).toEqual({ responses: 2, items: 6 });
    clock += 30_000;
    expect(store.get('resp_2')).toBeUndefined();
    expect(store.conversation('resp_2')).toBeUndefined();
    expect(store.get('resp_3')).toBeDefined();
  });

  it('deletes expired responses when it opens', () => {
    open({ ttlSeconds: 60 }).put(entry('resp_1'));
    stores.pop()!.close();
    clock += 60_000;
    open({ ttlSeconds: 60 });
    expect(rowCounts()).toEqual({ responses: 0, items: 0 });
  });

  it('keeps the newest maxResponses responses', () => {
    const store = open({ maxResponses: 3 });
    for (let i = 1; i <= 5; i++) {
      store.put(entry(`resp_${i}`));
      clock += 1;
    }
    expect(['resp_1', 'resp_2', 'resp_3', 'resp_4', 'resp_5'].map((id) => store.get(id) !== undefined)).toEqual([false, false, true, true, true]);
    expect(rowCounts()).toEqual({ responses: 3, items: 9 });

    // A deleted response frees its place: the next put evicts nothing.
    store.delete('resp_4');
    store.put(entry('resp_6'));
    expect(['resp_3', 'resp_5', 'resp_6'].map((id) => store.get(id) !== undefined)).toEqual([true, true, true]);
    store.put(entry('resp_7'));
    expect(store.get('resp_3')).toBeUndefined();
    expect(rowCounts().responses).toBe(3);
  });

  it('refuses a response larger than maxBytesPerResponse with a 400 on `store`, storing nothing', () => {
    const big = entry('resp_big', { inputs: 10 });
    const size = [big.response, ...big.input, ...big.output].reduce<number>((sum, part) => sum + Buffer.byteLength(JSON.stringify(part)), 0);
    open({ maxBytesPerResponse: size }).put(big);
    expect(stores.pop()!.get('resp_big')).toEqual(big);

    const store = open({ maxBytesPerResponse: size - 1 });
    store.delete('resp_big');
    let error: unknown;
    try {
      store.put(big);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidRequestError);
    expect(error).toMatchObject({ status: 400, param: 'store' });
    expect((error as Error).message).toContain(`${size} bytes`);
    expect(store.get('resp_big')).toBeUndefined();
    expect(rowCounts()).toEqual({ responses: 0, items: 0 });
  });

  describe('inputItems, paged as OpenAI pages input_items', () => {
    const page = (store: ResponseStore, after: string | undefined, limit: number, order: 'asc' | 'desc') => {
      const result = store.inputItems('resp_1', { after, limit, order })!;
      return { ...result, data: ids(result.data) };
    };
    const item = (i: number) => `resp_1_in_${i}`;

    it('pages forward with after, limit and has_more', () => {
      const store = open();
      store.put(entry('resp_1', { inputs: 7 }));
      expect(page(store, undefined, 3, 'asc')).toEqual({ data: [0, 1, 2].map(item), firstId: item(0), lastId: item(2), hasMore: true });
      expect(page(store, item(2), 3, 'asc')).toEqual({ data: [3, 4, 5].map(item), firstId: item(3), lastId: item(5), hasMore: true });
      expect(page(store, item(5), 3, 'asc')).toEqual({ data: [item(6)], firstId: item(6), lastId: item(6), hasMore: false });
      expect(page(store, item(3), 3, 'asc')).toEqual({ data: [4, 5, 6].map(item), firstId: item(4), lastId: item(6), hasMore: false });
      expect(page(store, item(6), 3, 'asc')).toEqual({ data: [], firstId: null, lastId: null, hasMore: false });
    });

    it('pages backward from the newest item in desc order', () => {
      const store = open();
      store.put(entry('resp_1', { inputs: 7 }));
      expect(page(store, undefined, 3, 'desc')).toEqual({ data: [6, 5, 4].map(item), firstId: item(6), lastId: item(4), hasMore: true });
      expect(page(store, item(4), 3, 'desc')).toEqual({ data: [3, 2, 1].map(item), firstId: item(3), lastId: item(1), hasMore: true });
      expect(page(store, item(1), 3, 'desc')).toEqual({ data: [item(0)], firstId: item(0), lastId: item(0), hasMore: false });
      expect(page(store, undefined, 100, 'desc').data).toEqual([6, 5, 4, 3, 2, 1, 0].map(item));
      expect(page(store, undefined, 1, 'asc')).toEqual({ data: [item(0)], firstId: item(0), lastId: item(0), hasMore: true });
    });

    it('gives whole items, output items excluded', () => {
      const store = open();
      const one = entry('resp_1', { inputs: 2, outputs: 3 });
      store.put(one);
      expect(store.inputItems('resp_1', { limit: 100, order: 'asc' })!.data).toEqual(one.input);
    });

    it('refuses a limit outside 1..100 and an unknown after with a 400 naming the parameter', () => {
      const store = open();
      store.put(entry('resp_1'));
      for (const limit of [0, 101, 1.5, Number.NaN]) {
        expect(() => store.inputItems('resp_1', { limit, order: 'asc' }), String(limit)).toThrow(expect.objectContaining({ status: 400, param: 'limit' }));
      }
      expect(() => store.inputItems('resp_1', { after: 'resp_1_out_0', limit: 10, order: 'asc' })).toThrow(expect.objectContaining({ status: 400, param: 'after' }));
      expect(store.inputItems('resp_unknown', { limit: 10, order: 'asc' })).toBeUndefined();
    });
  });

  describe('conversation', () => {
    it('is every item of the chain, oldest response first', () => {
      const store = open();
      store.put(entry('resp_1'));
      store.put(entry('resp_2', { previous: 'resp_1', inputs: 1 }));
      store.put(entry('resp_3', { previous: 'resp_2', inputs: 1, outputs: 2 }));
      expect(ids(store.conversation('resp_3'))).toEqual(['resp_1_in_0', 'resp_1_in_1', 'resp_1_out_0', 'resp_2_in_0', 'resp_2_out_0', 'resp_3_in_0', 'resp_3_out_0', 'resp_3_out_1']);
      expect(ids(store.conversation('resp_2'))).toEqual(['resp_1_in_0', 'resp_1_in_1', 'resp_1_out_0', 'resp_2_in_0', 'resp_2_out_0']);
      expect(store.conversation('resp_1')).toEqual([...entry('resp_1').input, ...entry('resp_1').output]);
      expect(store.conversation('resp_unknown')).toBeUndefined();
    });

    it('stops at a deleted link', () => {
      const store = open();
      store.put(entry('resp_1'));
      store.put(entry('resp_2', { previous: 'resp_1' }));
      store.put(entry('resp_3', { previous: 'resp_2' }));
      store.delete('resp_2');
      expect(ids(store.conversation('resp_3'))).toEqual(['resp_3_in_0', 'resp_3_in_1', 'resp_3_out_0']);
      expect(ids(store.conversation('resp_1'))).toEqual(['resp_1_in_0', 'resp_1_in_1', 'resp_1_out_0']);
    });
  });

  it('keeps its responses across a close and an open (a server restart)', () => {
    const first = open();
    first.put(entry('resp_1'));
    first.put(entry('resp_2', { previous: 'resp_1' }));
    first.close();
    stores.pop();
    const second = open();
    expect(second.get('resp_2')).toEqual(entry('resp_2', { previous: 'resp_1' }));
    expect(ids(second.conversation('resp_2'))).toHaveLength(6);
  });

  it('moves a file that is not a database aside, says so, and starts empty', async () => {
    await mkdir(path.dirname(file));
    const garbage = Buffer.alloc(64 * 1024, 'not a database, just bytes. ');
    await writeFile(file, garbage);
    const logged: string[] = [];
    const store = open({ log: (message) => logged.push(message) });

    expect(logged).toHaveLength(1);
    const aside = readdirSync(path.dirname(file)).filter((name) => name.startsWith('responses.db.corrupt-'));
    expect(aside).toEqual([`responses.db.corrupt-2023-11-14T22-13-20-000Z`]);
    expect(readFileSync(path.join(path.dirname(file), aside[0]!))).toEqual(garbage);
    expect(logged[0]).toContain(file);
    expect(logged[0]).toContain(aside[0]);
    expect(logged[0]).not.toContain('just bytes');

    store.put(entry('resp_1'));
    expect(store.get('resp_1')).toEqual(entry('resp_1'));
  });

  it('refuses a database of a newer schema, naming the file, and leaves it in place', () => {
    open().put(entry('resp_1'));
    stores.pop()!.close();
    const db = new Database(file);
    db.pragma('user_version = 99');
    db.close();
    expect(() => open()).toThrow(`The response store ${file} has schema version 99`);
    expect(readdirSync(path.dirname(file)).filter((name) => name.includes('corrupt'))).toEqual([]);
  });
});

describe('ResponseStore, written by a process killed mid-put', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-responses-crash-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Runs the writer until it has stored a few responses, then SIGKILLs it at a random moment; returns the ids it reported stored. */
  async function writeAndKill(file: string): Promise<string[]> {
    const child = spawn(process.execPath, ['--import', 'tsx', WRITER, file, '10000'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
    let output = '';
    const stored = new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (data: Buffer) => {
        output += data;
        if (/stored 2\n/.test(output)) resolve();
      });
      child.stderr.on('data', (data: Buffer) => (output += data));
      void exited.then(() => reject(new Error(`the writer exited before it was killed:\n${output}`)));
    });
    await stored;
    await sleep(Math.random() * 150);
    child.kill('SIGKILL');
    await exited;
    return [...output.matchAll(/stored (\d+)\n/g)].map((m) => `resp_${child.pid}_${m[1]}`);
  }

  it('leaves a database that passes integrity_check, with every reported response whole', { timeout: 120_000 }, async () => {
    const file = path.join(dir, 'responses.db');
    const reported: string[] = [];
    for (let round = 0; round < 8; round++) reported.push(...(await writeAndKill(file)));

    const db = new Database(file);
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(db.pragma('foreign_key_check')).toEqual([]);
      const count = db.prepare('SELECT count(*) FROM responses').pluck().get();
      expect(db.prepare('SELECT n FROM response_count').pluck().get()).toBe(count);
    } finally {
      db.close();
    }

    const store = ResponseStore.open(file, { ttlSeconds: Infinity, maxResponses: 10_000, maxBytesPerResponse: 64 * 1024 * 1024 });
    try {
      const db = new Database(file, { readonly: true });
      const present = db.prepare('SELECT id FROM responses').pluck().all() as string[];
      db.close();
      // Every put that returned is there (committed), and at most the one in flight at each kill beyond them.
      expect(present).toEqual(expect.arrayContaining(reported));
      expect(present.length - reported.length).toBeLessThanOrEqual(8);
      for (const id of present) {
        const response = store.get(id)!;
        const { inputCount, outputCount } = response.response as { inputCount: number; outputCount: number };
        expect([id, response.input.length, response.output.length]).toEqual([id, inputCount, outputCount]);
        expect(ids(response.input)).toEqual(Array.from({ length: inputCount }, (_, i) => `${id}_in_${i}`));
      }
    } finally {
      store.close();
    }
  });
});
