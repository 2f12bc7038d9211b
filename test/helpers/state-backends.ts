import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { PgStateStore } from '../../src/core/state/postgres/index.js';
import { SqliteStateStore } from '../../src/core/state/sqlite/index.js';
import type { StateStore, StateStoreOptions, StoredResponse } from '../../src/core/state/store.js';
import { startPostgres, type TestPostgres } from './postgres.js';

/**
 * The two state store backends as the contract tests drive them: each gives
 * a fresh location (a SQLite file, a PostgreSQL database) that every store
 * it opens until the next `fresh` shares — two stores on one location are
 * two replicas — and reads row counts from the database itself, beside the
 * stores.
 */

export interface Backend {
  readonly name: 'sqlite' | 'postgres';
  /** Starts the server, where there is one (once per file). */
  setUp(): Promise<void>;
  tearDown(): Promise<void>;
  /** A new, empty location; returns it (a file or a URL). */
  fresh(): Promise<string>;
  open(options: StateStoreOptions): Promise<StateStore>;
  /** A query on the location, as the database holds it, with SQLite's `?` placeholders. */
  count(sql: string, ...params: unknown[]): Promise<number>;
  /** The server, for outage tests (PostgreSQL started by the tests only). */
  server?: TestPostgres;
}

/** The tables as each backend names them, in `count` queries written with the SQLite names. */
const PG_NAMES: Record<string, string> = { responses: 'lserve_responses', items: 'lserve_response_items', speech_jobs: 'lserve_speech_jobs' };

export function sqliteBackend(): Backend {
  let dir: string | undefined;
  let file = '';
  return {
    name: 'sqlite',
    async setUp() {},
    async tearDown() {
      if (dir) await rm(dir, { recursive: true, force: true });
    },
    async fresh() {
      dir ??= await mkdtemp(path.join(os.tmpdir(), 'lserve-state-'));
      file = path.join(dir, `${Math.random().toString(36).slice(2)}`, 'responses.db');
      return file;
    },
    async open(options) {
      return SqliteStateStore.open(file, options);
    },
    async count(sql, ...params) {
      const db = new Database(file, { readonly: true });
      try {
        return Number(db.prepare(sql).pluck().get(...params));
      } finally {
        db.close();
      }
    },
  };
}

export function postgresBackend(): Backend {
  let url = '';
  const backend: Backend = {
    name: 'postgres',
    async setUp() {
      backend.server = await startPostgres();
    },
    async tearDown() {
      await backend.server?.close();
    },
    async fresh() {
      url = await backend.server!.createDatabase();
      return url;
    },
    async open(options) {
      return PgStateStore.open(url, options);
    },
    async count(sql, ...params) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        let n = 0;
        const text = sql.replace(/\?/g, () => `$${++n}`).replace(/\b(responses|items|speech_jobs)\b/g, (name) => PG_NAMES[name]!);
        const { rows } = await client.query<unknown[]>({ text, values: params, rowMode: 'array' });
        return Number(rows[0]![0]);
      } finally {
        await client.end();
      }
    },
  };
  return backend;
}

/** A response `id` with `inputs` input items (ids `<id>_in_<i>`) and `outputs` output items. */
export function entry(id: string, options: { previous?: string; inputs?: number; outputs?: number } = {}): StoredResponse {
  const { previous = null, inputs = 2, outputs = 1 } = options;
  return {
    id,
    model: 'qwen3-0.6b',
    createdAt: 1_700_000_000,
    previousResponseId: previous,
    input: Array.from({ length: inputs }, (_, i) => ({ id: `${id}_in_${i}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: `${id} question ${i}` }] })),
    output: Array.from({ length: outputs }, (_, i) => ({ id: `${id}_out_${i}`, type: 'message', role: 'assistant', content: [{ type: 'output_text', text: `${id} answer ${i}` }] })),
    response: { id, object: 'response', status: 'completed', previous_response_id: previous },
  };
}

export const ids = (items: unknown[] | undefined) => items?.map((item) => (item as { id: string }).id);
