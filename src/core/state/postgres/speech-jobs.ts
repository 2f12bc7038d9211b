import { tooManySpeechJobs } from '../speech-jobs.js';
import type { SpeechJobRecord, SpeechJobRepository } from '../store.js';
import type { PgDatabase } from './database.js';
import { LOCK_SPACE, SPEECH_JOBS_LOCK } from './migrations.js';

/**
 * Speech stream jobs in PostgreSQL. A claim is one `DELETE … RETURNING` on
 * the token's row: of two replicas claiming at once, the second waits on the
 * row lock and then finds the row gone, so a token is handed out once.
 * Creations queue on an advisory lock, so the bound on pending jobs holds
 * over all replicas exactly.
 */
export class PgSpeechJobs implements SpeechJobRepository {
  readonly #db: PgDatabase;
  readonly #maxPending: number;
  readonly #now: () => number;

  constructor(db: PgDatabase, options: { maxPendingSpeechJobs: number; now?: () => number }) {
    this.#db = db;
    this.#maxPending = options.maxPendingSpeechJobs;
    this.#now = options.now ?? Date.now;
  }

  async create(job: SpeechJobRecord): Promise<void> {
    const request = JSON.stringify(job.request);
    await this.#db.transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1, $2)', [LOCK_SPACE, SPEECH_JOBS_LOCK]);
      const now = this.#now();
      await client.query('DELETE FROM lserve_speech_jobs WHERE expires_at <= $1', [now]);
      const { rows } = await client.query<{ pending: number }>('SELECT count(*)::integer AS pending FROM lserve_speech_jobs');
      const pending = rows[0]!.pending;
      if (pending >= this.#maxPending) throw tooManySpeechJobs(pending);
      await client.query('INSERT INTO lserve_speech_jobs (token, model, request, expires_at) VALUES ($1, $2, $3, $4)', [job.token, job.model, request, job.expiresAt]);
    });
  }

  async claim(token: string): Promise<SpeechJobRecord | undefined> {
    const { rows } = await this.#db.query<{ model: string; request: string; expires_at: string }>(
      'DELETE FROM lserve_speech_jobs WHERE token = $1 AND expires_at > $2 RETURNING model, request, expires_at',
      [token, this.#now()],
    );
    const row = rows[0];
    return row && { token, model: row.model, request: JSON.parse(row.request) as unknown, expiresAt: Number(row.expires_at) };
  }

  async unclaimed(tokens: readonly string[]): Promise<Set<string>> {
    if (tokens.length === 0) return new Set();
    const { rows } = await this.#db.read((db) =>
      db.query<{ token: string }>('SELECT token FROM lserve_speech_jobs WHERE token = ANY ($1::text[]) AND expires_at > $2', [tokens, this.#now()]),
    );
    return new Set(rows.map((row) => row.token));
  }

  async sweep(): Promise<number> {
    const { rowCount } = await this.#db.query('DELETE FROM lserve_speech_jobs WHERE expires_at <= $1', [this.#now()]);
    return rowCount ?? 0;
  }
}
