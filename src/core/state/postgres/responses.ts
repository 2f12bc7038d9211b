import type pg from 'pg';
import { checkPageLimit, encodeResponse, expiredAt, itemPage, unknownAfter } from '../responses.js';
import type { ItemPage, ItemPageQuery, ResponseRepository, ResponseStoreOptions, StoredResponse } from '../store.js';
import type { PgDatabase } from './database.js';
import { LOCK_SPACE, RESPONSES_LOCK } from './migrations.js';

/**
 * Stored responses in PostgreSQL, with SQLite's rules (sqlite/responses.ts):
 * a put is one transaction, retention by age and count runs in it, expired
 * responses are invisible at once. Puts of all replicas queue on one advisory
 * lock, as SQLite's writers do on its file lock: retention then counts
 * exactly, and two puts of one id cannot race. Each read is one statement,
 * so it sees one snapshot.
 */

interface ResponseRow {
  id: string;
  model: string;
  created_at: string; // bigint: pg hands it over as text
  previous_id: string | null;
  response: string;
  input: string[];
  output: string[];
}

export class PgResponses implements ResponseRepository {
  readonly #db: PgDatabase;
  readonly #options: ResponseStoreOptions;
  readonly #now: () => number;

  constructor(db: PgDatabase, options: ResponseStoreOptions) {
    this.#db = db;
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  async put(entry: StoredResponse): Promise<void> {
    const { response, input, output } = encodeResponse(entry, this.#options.maxBytesPerResponse);
    await this.#db.transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1, $2)', [LOCK_SPACE, RESPONSES_LOCK]);
      await client.query('DELETE FROM lserve_responses WHERE id = $1', [entry.id]);
      await client.query('INSERT INTO lserve_responses (id, model, created_at, stored_at, previous_id, response) VALUES ($1, $2, $3, $4, $5, $6)', [
        entry.id,
        entry.model,
        entry.createdAt,
        this.#now(),
        entry.previousResponseId,
        response,
      ]);
      await insertItems(client, entry.id, 'input', input);
      this.#options.midPut?.();
      await insertItems(client, entry.id, 'output', output);
      await this.#retain(client);
    });
  }

  async get(id: string): Promise<StoredResponse | undefined> {
    const { rows } = await this.#db.read((db) =>
      db.query<ResponseRow>(
        `SELECT id, model, created_at, previous_id, response,
           ARRAY(SELECT json FROM lserve_response_items WHERE response_id = r.id AND kind = 'input' ORDER BY seq) AS input,
           ARRAY(SELECT json FROM lserve_response_items WHERE response_id = r.id AND kind = 'output' ORDER BY seq) AS output
         FROM lserve_responses r WHERE id = $1 AND stored_at > $2`,
        [id, this.#expiredAt()],
      ),
    );
    const row = rows[0];
    if (!row) return undefined;
    return {
      id: row.id,
      model: row.model,
      createdAt: Number(row.created_at),
      previousResponseId: row.previous_id,
      input: row.input.map(parse),
      output: row.output.map(parse),
      response: JSON.parse(row.response) as Record<string, unknown>,
    };
  }

  async delete(id: string): Promise<boolean> {
    const { rowCount } = await this.#db.query('DELETE FROM lserve_responses WHERE id = $1 AND stored_at > $2', [id, this.#expiredAt()]);
    return (rowCount ?? 0) > 0;
  }

  async inputItems(id: string, page: ItemPageQuery): Promise<ItemPage | undefined> {
    checkPageLimit(page);
    const { after, limit, order } = page;
    return this.#db.read(async (db) => {
      const found = await db.query<{ after_seq: number | null }>(
        `SELECT (SELECT seq FROM lserve_response_items WHERE response_id = r.id AND kind = 'input' AND item_id = $3 ORDER BY seq LIMIT 1) AS after_seq
         FROM lserve_responses r WHERE id = $1 AND stored_at > $2`,
        [id, this.#expiredAt(), after ?? null],
      );
      if (found.rows.length === 0) return undefined;
      const afterSeq = found.rows[0]!.after_seq;
      if (after !== undefined && afterSeq === null) throw unknownAfter(id, after);
      const from = afterSeq ?? (order === 'asc' ? -1 : 2 ** 31 - 1);
      const { rows } = await db.query<{ item_id: string | null; json: string }>(
        `SELECT item_id, json FROM lserve_response_items WHERE response_id = $1 AND kind = 'input' AND ${order === 'asc' ? 'seq > $2 ORDER BY seq ASC' : 'seq < $2 ORDER BY seq DESC'} LIMIT $3`,
        [id, from, limit + 1],
      );
      return itemPage(rows, limit);
    });
  }

  async conversation(id: string): Promise<unknown[] | undefined> {
    // The chain from `id` back through previous_id, live links only, stopping at a link already seen.
    const { rows } = await this.#db.read((db) =>
      db.query<{ json: string | null }>(
        `WITH RECURSIVE chain (id, previous_id, depth, seen) AS (
           SELECT id, previous_id, 0, ARRAY[id] FROM lserve_responses WHERE id = $1 AND stored_at > $2
           UNION ALL
           SELECT r.id, r.previous_id, c.depth + 1, c.seen || r.id
           FROM chain c JOIN lserve_responses r ON r.id = c.previous_id
           WHERE r.stored_at > $2 AND r.id <> ALL (c.seen)
         )
         SELECT i.json FROM chain c LEFT JOIN lserve_response_items i ON i.response_id = c.id
         ORDER BY c.depth DESC, i.kind, i.seq`,
        [id, this.#expiredAt()],
      ),
    );
    if (rows.length === 0) return undefined;
    return rows.flatMap((row) => (row.json === null ? [] : [parse(row.json)]));
  }

  /** Deletes what retention no longer keeps, in a transaction of its own (at open). */
  async retain(): Promise<void> {
    await this.#db.transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1, $2)', [LOCK_SPACE, RESPONSES_LOCK]);
      await this.#retain(client);
    });
  }

  #expiredAt(): number {
    return expiredAt(this.#options, this.#now());
  }

  /** Expired responses, then the oldest beyond `maxResponses` (items go by cascade); inside a put's transaction. */
  async #retain(client: pg.PoolClient): Promise<void> {
    if (this.#options.ttlSeconds !== Infinity) await client.query('DELETE FROM lserve_responses WHERE stored_at <= $1', [this.#expiredAt()]);
    if (this.#options.maxResponses !== Infinity) {
      await client.query('DELETE FROM lserve_responses WHERE id IN (SELECT id FROM lserve_responses ORDER BY stored_at DESC, seq DESC OFFSET $1)', [
        this.#options.maxResponses,
      ]);
    }
  }
}

/** All items of one kind in one statement: arrays in, rows out, numbered from 0. */
async function insertItems(client: pg.PoolClient, id: string, kind: 'input' | 'output', items: ReadonlyArray<readonly [string | null, string]>): Promise<void> {
  if (items.length === 0) return;
  await client.query(
    `INSERT INTO lserve_response_items (response_id, kind, seq, item_id, json)
     SELECT $1, $2, t.n - 1, t.item_id, t.json FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS t (item_id, json, n)`,
    [id, kind, items.map(([itemId]) => itemId), items.map(([, json]) => json)],
  );
}

const parse = (json: string): unknown => JSON.parse(json) as unknown;
