import type Database from 'better-sqlite3';
import { checkPageLimit, checkResponseStoreOptions, encodeResponse, expiredAt, itemPage, unknownAfter } from '../responses.js';
import type { ItemPage, ItemPageQuery, ResponseStoreOptions, StoredResponse } from '../store.js';
import { openDatabase } from './database.js';

/**
 * Stored responses of the Responses API (`store: true`): each response with
 * its input and output items, in SQLite (schema and crash-safety in
 * database.ts). A response is written in one transaction, so after a crash it
 * is either whole or absent.
 *
 * better-sqlite3 is synchronous, and that is fine here: with 10 000 responses
 * kept, a put (retention included) measured about 0.3 ms for a 5 kB response
 * and 1 ms for a 25 kB one on a busy 2-core machine, a get 0.03–0.2 ms —
 * next to a generation of seconds — and a synchronous call cannot interleave
 * with another request's half-done write. Statements are prepared once, at open.
 * The server reaches it through the async StateStore (index.ts).
 *
 * Retention costs no timer: expired responses are invisible to every read at
 * once, and are deleted — with the oldest beyond `maxResponses` — in the
 * transaction of each put and at open.
 */

export type { ItemPage, ResponseStoreOptions, StoredResponse } from '../store.js';

interface ItemRow {
  item_id: string | null;
  json: string;
}

interface ResponseRow {
  id: string;
  model: string;
  created_at: number;
  previous_id: string | null;
  response: string;
}

export class ResponseStore {
  readonly #db: Database.Database;
  readonly #options: ResponseStoreOptions;
  readonly #now: () => number;
  readonly #sql: ReturnType<typeof prepare>;

  /** The store over an open database (see openDatabase); deletes what retention no longer keeps. */
  constructor(db: Database.Database, options: ResponseStoreOptions) {
    checkResponseStoreOptions(options);
    this.#db = db;
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#sql = prepare(db);
    db.transaction(() => this.#retain())();
  }

  /** Opens (creating if needed) the database at `file` and the store over it; `close` closes both. */
  static open(file: string | ':memory:', options: ResponseStoreOptions): ResponseStore {
    checkResponseStoreOptions(options);
    const log = options.log ?? ((message: string) => process.stderr.write(`${message}\n`));
    return new ResponseStore(openDatabase(file, log, options.now ?? Date.now), options);
  }

  /** Stores `entry` (replacing one of the same id) in one transaction; too large → 400 on `store`. */
  put(entry: StoredResponse): void {
    const { response, input, output } = encodeResponse(entry, this.#options.maxBytesPerResponse);
    this.#db.transaction(() => {
      this.#sql.deleteResponse.run(entry.id);
      this.#sql.insertResponse.run(entry.id, entry.model, entry.createdAt, this.#now(), entry.previousResponseId, response);
      input.forEach(([id, json], seq) => this.#sql.insertItem.run(entry.id, 'input', seq, id, json));
      this.#options.midPut?.();
      output.forEach(([id, json], seq) => this.#sql.insertItem.run(entry.id, 'output', seq, id, json));
      this.#retain();
    })();
  }

  /** The response `id`, or undefined when unknown or expired. */
  get(id: string): StoredResponse | undefined {
    return this.#db.transaction(() => {
      const row = this.#sql.response.get(id, this.#expiredAt());
      if (!row) return undefined;
      return {
        id: row.id,
        model: row.model,
        createdAt: row.created_at,
        previousResponseId: row.previous_id,
        input: this.#items(id, 'input'),
        output: this.#items(id, 'output'),
        response: JSON.parse(row.response) as Record<string, unknown>,
      };
    })();
  }

  /** Deletes the response `id` and its items; false when there was none (an expired one counts as none, as for `get`). */
  delete(id: string): boolean {
    return this.#sql.deleteLive.run(id, this.#expiredAt()).changes > 0;
  }

  /**
   * One page of the input items of the response `id`, as OpenAI's
   * `input_items.list`: in `order`, starting after the item `after` (in that
   * order); undefined when the response is unknown or expired.
   */
  inputItems(id: string, page: ItemPageQuery): ItemPage | undefined {
    checkPageLimit(page);
    const { after, limit, order } = page;
    return this.#db.transaction(() => {
      if (!this.#sql.response.get(id, this.#expiredAt())) return undefined;
      let from = order === 'asc' ? -1 : Number.MAX_SAFE_INTEGER;
      if (after !== undefined) {
        const seq = this.#sql.inputSeq.get(id, after);
        if (seq === undefined) throw unknownAfter(id, after);
        from = seq;
      }
      return itemPage((order === 'asc' ? this.#sql.inputsAsc : this.#sql.inputsDesc).all(id, from, limit + 1), limit);
    })();
  }

  /**
   * The conversation that `previous_response_id: id` continues: the input and
   * output items of each response of the chain ending at `id`, oldest first.
   * Undefined when `id` is unknown or expired; an older link that is gone
   * (deleted, expired, evicted) ends the chain there.
   */
  conversation(id: string): unknown[] | undefined {
    return this.#db.transaction(() => {
      const expired = this.#expiredAt();
      const chain: string[] = [];
      const seen = new Set<string>();
      for (let next: string | null = id; next !== null && !seen.has(next); ) {
        const row = this.#sql.response.get(next, expired);
        if (!row) break;
        seen.add(next);
        chain.unshift(next);
        next = row.previous_id;
      }
      if (chain.length === 0) return undefined;
      return chain.flatMap((link) => [...this.#items(link, 'input'), ...this.#items(link, 'output')]);
    })();
  }

  close(): void {
    this.#db.close();
  }

  #items(id: string, kind: 'input' | 'output'): unknown[] {
    return this.#sql.items.all(id, kind).map((json) => JSON.parse(json) as unknown);
  }

  #expiredAt(): number {
    return expiredAt(this.#options, this.#now());
  }

  /** Deletes expired responses and the oldest beyond `maxResponses` (their items go by cascade); call inside a transaction. */
  #retain(): void {
    if (this.#options.ttlSeconds !== Infinity) this.#sql.deleteExpired.run(this.#expiredAt());
    if (this.#options.maxResponses !== Infinity) this.#sql.deleteBeyond.run(this.#options.maxResponses);
  }
}

/** Every statement the store runs, prepared once. */
function prepare(db: Database.Database) {
  return {
    insertResponse: db.prepare<[string, string, number, number, string | null, string]>(
      'INSERT INTO responses (id, model, created_at, stored_at, previous_id, response) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    insertItem: db.prepare<[string, 'input' | 'output', number, string | null, string]>(
      'INSERT INTO items (response_id, kind, seq, item_id, json) VALUES (?, ?, ?, ?, ?)',
    ),
    deleteResponse: db.prepare<[string]>('DELETE FROM responses WHERE id = ?'),
    deleteLive: db.prepare<[string, number]>('DELETE FROM responses WHERE id = ? AND stored_at > ?'),
    deleteExpired: db.prepare<[number]>('DELETE FROM responses WHERE stored_at <= ?'),
    // The oldest responses beyond the bound: walks only that many entries of the age index.
    deleteBeyond: db.prepare<[number]>(
      'DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY stored_at, rowid LIMIT max(0, (SELECT n FROM response_count) - ?))',
    ),
    response: db.prepare<[string, number], ResponseRow>(
      'SELECT id, model, created_at, previous_id, response FROM responses WHERE id = ? AND stored_at > ?',
    ),
    items: db.prepare<[string, 'input' | 'output'], string>('SELECT json FROM items WHERE response_id = ? AND kind = ? ORDER BY seq').pluck(),
    inputSeq: db.prepare<[string, string], number>(
      "SELECT seq FROM items WHERE response_id = ? AND kind = 'input' AND item_id = ? ORDER BY seq LIMIT 1",
    ).pluck(),
    inputsAsc: db.prepare<[string, number, number], ItemRow>(
      "SELECT item_id, json FROM items WHERE response_id = ? AND kind = 'input' AND seq > ? ORDER BY seq ASC LIMIT ?",
    ),
    inputsDesc: db.prepare<[string, number, number], ItemRow>(
      "SELECT item_id, json FROM items WHERE response_id = ? AND kind = 'input' AND seq < ? ORDER BY seq DESC LIMIT ?",
    ),
  };
}
