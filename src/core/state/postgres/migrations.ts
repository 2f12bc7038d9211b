import type { PgDatabase } from './database.js';

/**
 * The PostgreSQL schema, as numbered migrations that lserve applies at
 * start: entry i takes the database from version i to i + 1, each recorded
 * in `lserve_schema_migrations` in the same transaction as its DDL. Replicas
 * starting at once queue on a transaction-scoped advisory lock, so one
 * applies what is missing and the others find it done. Tables carry an
 * `lserve_` prefix: the database may be shared with other applications.
 *
 * Times are milliseconds on the replicas' clocks (as in SQLite), so expiry
 * and retention read the same on both backends.
 */

/** Advisory lock keys: (LOCK_SPACE, one of the others). */
export const LOCK_SPACE = 0x6c737276; // 'lsrv'
export const MIGRATION_LOCK = 1;
export const RESPONSES_LOCK = 2;
export const SPEECH_JOBS_LOCK = 3;

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE lserve_responses (
     id          text PRIMARY KEY,
     model       text NOT NULL,
     created_at  bigint NOT NULL,
     stored_at   bigint NOT NULL,            -- when the store took it (ms): retention's order
     seq         bigint GENERATED ALWAYS AS IDENTITY, -- ties of stored_at, in insertion order
     previous_id text,                       -- no foreign key: a chain may outlive its older links
     response    text NOT NULL               -- JSON, returned as written
   );
   CREATE INDEX lserve_responses_by_age ON lserve_responses (stored_at, seq);
   CREATE TABLE lserve_response_items (
     response_id text NOT NULL REFERENCES lserve_responses (id) ON DELETE CASCADE,
     kind        text NOT NULL CHECK (kind IN ('input', 'output')),
     seq         integer NOT NULL,
     item_id     text,
     json        text NOT NULL,
     PRIMARY KEY (response_id, kind, seq)
   );
   CREATE INDEX lserve_response_items_by_id ON lserve_response_items (response_id, kind, item_id);`,
  `CREATE TABLE lserve_speech_jobs (
     token      text PRIMARY KEY,
     model      text NOT NULL,
     request    text NOT NULL,               -- JSON
     expires_at bigint NOT NULL              -- ms
   );
   CREATE INDEX lserve_speech_jobs_by_expiry ON lserve_speech_jobs (expires_at);`,
];

export const PG_SCHEMA_VERSION = MIGRATIONS.length;

/** Brings the database up to PG_SCHEMA_VERSION; refuses one written by a newer lserve. */
export async function migrate(db: PgDatabase): Promise<void> {
  await db.transaction(async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1, $2)', [LOCK_SPACE, MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS lserve_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
    const { rows } = await client.query<{ version: number }>('SELECT coalesce(max(version), 0) AS version FROM lserve_schema_migrations');
    const version = rows[0]!.version;
    if (version > PG_SCHEMA_VERSION) {
      throw new Error(`The PostgreSQL state database has schema version ${version}, newer than this lserve's ${PG_SCHEMA_VERSION}: it was written by a newer lserve.`);
    }
    for (let next = version; next < PG_SCHEMA_VERSION; next++) {
      await client.query(MIGRATIONS[next]!);
      await client.query('INSERT INTO lserve_schema_migrations (version) VALUES ($1)', [next + 1]);
    }
  });
}
