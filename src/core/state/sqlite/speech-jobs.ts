import type Database from 'better-sqlite3';
import { tooManySpeechJobs } from '../speech-jobs.js';
import type { SpeechJobRecord } from '../store.js';

/**
 * Speech stream jobs in SQLite, synchronous as the response store is. A
 * claim is one `DELETE … RETURNING`: SQLite runs one writer at a time, also
 * across the processes sharing the file, so a token is handed out once.
 */
export class SqliteSpeechJobs {
  readonly #db: Database.Database;
  readonly #maxPending: number;
  readonly #now: () => number;
  readonly #sql: ReturnType<typeof prepare>;

  constructor(db: Database.Database, options: { maxPendingSpeechJobs: number; now?: () => number }) {
    this.#db = db;
    this.#maxPending = options.maxPendingSpeechJobs;
    this.#now = options.now ?? Date.now;
    this.#sql = prepare(db);
  }

  create(job: SpeechJobRecord): void {
    const request = JSON.stringify(job.request);
    this.#db
      .transaction(() => {
        const now = this.#now();
        this.#sql.deleteExpired.run(now);
        const pending = this.#sql.pending.get(now)!;
        if (pending >= this.#maxPending) throw tooManySpeechJobs(pending);
        this.#sql.insert.run(job.token, job.model, request, job.expiresAt);
      })
      .immediate();
  }

  claim(token: string): SpeechJobRecord | undefined {
    const row = this.#sql.claim.get(token, this.#now());
    return row && { token, model: row.model, request: JSON.parse(row.request) as unknown, expiresAt: row.expires_at };
  }

  unclaimed(tokens: readonly string[]): Set<string> {
    const now = this.#now();
    return new Set(tokens.filter((token) => this.#sql.waiting.get(token, now) !== undefined));
  }

  sweep(): number {
    return this.#sql.deleteExpired.run(this.#now()).changes;
  }
}

function prepare(db: Database.Database) {
  return {
    insert: db.prepare<[string, string, string, number]>('INSERT INTO speech_jobs (token, model, request, expires_at) VALUES (?, ?, ?, ?)'),
    claim: db.prepare<[string, number], { model: string; request: string; expires_at: number }>(
      'DELETE FROM speech_jobs WHERE token = ? AND expires_at > ? RETURNING model, request, expires_at',
    ),
    waiting: db.prepare<[string, number], number>('SELECT 1 FROM speech_jobs WHERE token = ? AND expires_at > ?').pluck(),
    pending: db.prepare<[number], number>('SELECT count(*) FROM speech_jobs WHERE expires_at > ?').pluck(),
    deleteExpired: db.prepare<[number]>('DELETE FROM speech_jobs WHERE expires_at <= ?'),
  };
}
