import { chmodSync, closeSync, existsSync, mkdirSync, openSync, renameSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';

/**
 * Opening the state database (`<home>/responses.db`: stored responses and
 * speech stream jobs): file, pragmas, schema migrations, and what happens to
 * a file SQLite cannot read.
 *
 * Journal: WAL with `synchronous=NORMAL`. A transaction commits by appending
 * to the WAL; with NORMAL that append reaches the OS (not yet the disk) before
 * COMMIT returns, so a killed lserve (SIGKILL, OOM, a crash) never loses a
 * committed response and never leaves half of one, and only power loss or an
 * OS crash can roll back the last few commits — the database stays consistent
 * either way. FULL would add an fsync per stored response to protect a cache
 * the client can always rebuild by resending its input; not worth it.
 */

/**
 * Schema migrations: entry i takes `user_version` i to i + 1, so a database
 * written by an older lserve is brought up to date in one transaction at open.
 */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE responses (
     id          TEXT PRIMARY KEY,
     model       TEXT NOT NULL,
     created_at  INTEGER NOT NULL,
     -- when this store took it (the clock's ms): retention's order, independent of the caller's created_at
     stored_at   INTEGER NOT NULL,
     previous_id TEXT,             -- no foreign key: a chain may outlive its older links
     response    TEXT NOT NULL     -- JSON
   );
   CREATE INDEX responses_by_age ON responses (stored_at);
   -- The number of responses, kept by triggers, so retention finds the excess without counting the table each put.
   CREATE TABLE response_count (n INTEGER NOT NULL);
   INSERT INTO response_count VALUES (0);
   CREATE TRIGGER responses_counted_in AFTER INSERT ON responses BEGIN UPDATE response_count SET n = n + 1; END;
   CREATE TRIGGER responses_counted_out AFTER DELETE ON responses BEGIN UPDATE response_count SET n = n - 1; END;
   -- A rowid table: items run to kilobytes, which WITHOUT ROWID b-trees store poorly.
   CREATE TABLE items (
     response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
     kind        TEXT NOT NULL CHECK (kind IN ('input', 'output')),
     seq         INTEGER NOT NULL,
     item_id     TEXT,
     json        TEXT NOT NULL
   );
   CREATE UNIQUE INDEX items_in_order ON items (response_id, kind, seq);
   CREATE INDEX items_by_id ON items (response_id, kind, item_id);`,
  // Speech stream jobs, so that another lserve process on this home can serve a job's GET (speech-jobs.ts).
  `CREATE TABLE speech_jobs (
     token      TEXT PRIMARY KEY,
     model      TEXT NOT NULL,
     request    TEXT NOT NULL,     -- JSON
     expires_at INTEGER NOT NULL   -- ms
   );
   CREATE INDEX speech_jobs_by_expiry ON speech_jobs (expires_at);`,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** How long a statement waits for another process's write lock (two servers on one home) before failing. */
const BUSY_TIMEOUT_MS = 2_000;

/** Opens (creating if needed) the database at `file`, moving an unreadable one aside first. */
export function openDatabase(file: string, log: (message: string) => void, now: () => number): Database.Database {
  if (file === ':memory:') return connect(file);
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  // Stored conversations are as private as the prompts: owner-only. SQLite gives its -wal and -shm files the database file's mode.
  closeSync(openSync(file, 'a', 0o600));
  chmodSync(file, 0o600);
  try {
    return connect(file);
  } catch (error) {
    const code = unreadableCode(error);
    if (code === undefined) throw new Error(`Cannot open the response store ${file}: ${(error as Error).message}`, { cause: error });
    // A damaged store must not keep the server from starting: it only holds conversations a client can resend.
    // It is kept (not deleted) for whoever wants to recover it.
    const aside = moveAside(file, now());
    log(`The response store ${file} is not a readable SQLite database (${code}); moved it to ${aside} and started an empty one.`);
    closeSync(openSync(file, 'a', 0o600));
    return connect(file);
  }
}

function connect(file: string): Database.Database {
  const db = new Database(file);
  try {
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    if (file !== ':memory:') db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    migrate(db, file);
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}

function migrate(db: Database.Database, file: string): void {
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > SCHEMA_VERSION) {
      throw new Error(`The response store ${file} has schema version ${version}, newer than this lserve's ${SCHEMA_VERSION}: it was written by a newer lserve.`);
    }
    for (const step of MIGRATIONS.slice(version)) db.exec(step);
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}

/** SQLite's error code when `error` says the file is not a database, or a damaged one. */
function unreadableCode(error: unknown): string | undefined {
  if (!(error instanceof Database.SqliteError)) return undefined;
  const { code } = error as Error & { code: string };
  return code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT') ? code : undefined;
}

/** Renames the database and its WAL and shared-memory files to `<file>.corrupt-<time>…`; returns the new name. */
function moveAside(file: string, time: number): string {
  const aside = `${file}.corrupt-${new Date(time).toISOString().replace(/[:.]/g, '-')}`;
  // The WAL goes too: replayed into the fresh database, the old one's frames would corrupt it.
  for (const suffix of ['-wal', '-shm', '']) {
    if (existsSync(file + suffix)) renameSync(file + suffix, aside + suffix);
  }
  return aside;
}
