import type Database from 'better-sqlite3';
import { InvalidRequestError } from '../errors.js';
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
 *
 * Retention costs no timer: expired responses are invisible to every read at
 * once, and are deleted — with the oldest beyond `maxResponses` — in the
 * transaction of each put and at open.
 */

export interface StoredResponse {
  id: string;
  model: string;
  /** The response's `created_at` (unix seconds), returned as given. */
  createdAt: number;
  previousResponseId: string | null;
  /** Input items; each has a string `id` (the route assigns them), which `inputItems` pages by. */
  input: unknown[];
  output: unknown[];
  response: Record<string, unknown>;
}

export interface ItemPage {
  data: unknown[];
  firstId: string | null;
  lastId: string | null;
  hasMore: boolean;
}

export interface ResponseStoreOptions {
  /** A response expires this long after it was stored; `Infinity` keeps it. */
  ttlSeconds: number;
  /** The most responses kept; the oldest beyond are deleted. `Infinity` for no bound. */
  maxResponses: number;
  /** The most bytes one response may take (its JSON and its items' JSON together). */
  maxBytesPerResponse: number;
  /** The clock, in ms (default `Date.now`). */
  now?: () => number;
  /** Where the store reports a damaged database file it moved aside (default: stderr). */
  log?: (message: string) => void;
}

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

const ITEM_PAGE_MAX = 100;

export class ResponseStore {
  readonly #db: Database.Database;
  readonly #options: ResponseStoreOptions;
  readonly #now: () => number;
  readonly #sql: ReturnType<typeof prepare>;

  private constructor(db: Database.Database, options: ResponseStoreOptions) {
    this.#db = db;
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#sql = prepare(db);
  }

  static open(file: string | ':memory:', options: ResponseStoreOptions): ResponseStore {
    for (const key of ['ttlSeconds', 'maxResponses', 'maxBytesPerResponse'] as const) {
      if (!(options[key] > 0)) throw new RangeError(`ResponseStore: ${key} must be positive, got ${options[key]}`);
    }
    if (!Number.isInteger(options.maxResponses) && options.maxResponses !== Infinity) {
      throw new RangeError(`ResponseStore: maxResponses must be an integer or Infinity, got ${options.maxResponses}`);
    }
    const log = options.log ?? ((message: string) => process.stderr.write(`${message}\n`));
    const store = new ResponseStore(openDatabase(file, log, options.now ?? Date.now), options);
    store.#db.transaction(() => store.#retain())();
    return store;
  }

  /** Stores `entry` (replacing one of the same id) in one transaction; too large → 400 on `store`. */
  put(entry: StoredResponse): void {
    const response = JSON.stringify(entry.response);
    const input = entry.input.map((item) => [inputId(item, entry.id), JSON.stringify(item)] as const);
    const output = entry.output.map((item) => [itemId(item), JSON.stringify(item)] as const);
    let bytes = Buffer.byteLength(response);
    for (const [, json] of [...input, ...output]) bytes += Buffer.byteLength(json);
    if (bytes > this.#options.maxBytesPerResponse) {
      throw new InvalidRequestError(
        `This response takes ${bytes} bytes to store, more than this server's limit of ${this.#options.maxBytesPerResponse} bytes per stored response: send \`store: false\` to not store it.`,
        { param: 'store' },
      );
    }
    this.#db.transaction(() => {
      this.#sql.deleteResponse.run(entry.id);
      this.#sql.insertResponse.run(entry.id, entry.model, entry.createdAt, this.#now(), entry.previousResponseId, response);
      input.forEach(([id, json], seq) => this.#sql.insertItem.run(entry.id, 'input', seq, id, json));
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
  inputItems(id: string, page: { after?: string; limit: number; order: 'asc' | 'desc' }): ItemPage | undefined {
    const { after, limit, order } = page;
    if (!Number.isInteger(limit) || limit < 1 || limit > ITEM_PAGE_MAX) {
      throw new InvalidRequestError(`limit must be an integer from 1 to ${ITEM_PAGE_MAX}, got ${limit}.`, { param: 'limit' });
    }
    return this.#db.transaction(() => {
      if (!this.#sql.response.get(id, this.#expiredAt())) return undefined;
      let from = order === 'asc' ? -1 : Number.MAX_SAFE_INTEGER;
      if (after !== undefined) {
        const seq = this.#sql.inputSeq.get(id, after);
        if (seq === undefined) throw new InvalidRequestError(`No input item with id '${after}' in response '${id}'.`, { param: 'after' });
        from = seq;
      }
      // One row more than asked says whether another page follows.
      const rows = (order === 'asc' ? this.#sql.inputsAsc : this.#sql.inputsDesc).all(id, from, limit + 1);
      const shown = rows.slice(0, limit);
      return {
        data: shown.map((row) => JSON.parse(row.json) as unknown),
        firstId: shown[0]?.item_id ?? null,
        lastId: shown.at(-1)?.item_id ?? null,
        hasMore: rows.length > limit,
      };
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
      const expiredAt = this.#expiredAt();
      const chain: string[] = [];
      const seen = new Set<string>();
      for (let next: string | null = id; next !== null && !seen.has(next); ) {
        const row = this.#sql.response.get(next, expiredAt);
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

  /** Responses stored at or before this instant (ms) have expired. */
  #expiredAt(): number {
    const { ttlSeconds } = this.#options;
    return ttlSeconds === Infinity ? -Infinity : this.#now() - ttlSeconds * 1000;
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

function itemId(item: unknown): string | null {
  const id = (item as { id?: unknown } | null)?.id;
  return typeof id === 'string' ? id : null;
}

/** An input item's id: `inputItems` pages by it, so every input item must have one. */
function inputId(item: unknown, responseId: string): string {
  const id = itemId(item);
  if (id === null) throw new TypeError(`ResponseStore.put: an input item of ${responseId} has no string id`);
  return id;
}
