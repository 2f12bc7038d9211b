import { checkResponseStoreOptions } from '../responses.js';
import type { StateStore, StateStoreOptions } from '../store.js';
import { PgDatabase, type PgPoolOptions } from './database.js';
import { migrate } from './migrations.js';
import { PgResponses } from './responses.js';
import { PgSpeechJobs } from './speech-jobs.js';

/**
 * The state store in PostgreSQL (`lserve serve --database-url postgres://…`):
 * what several replicas behind one load balancer share. Opening applies the
 * schema migrations and retention; a database that cannot be reached then
 * fails the open (the server does not start without its state), and later
 * answers each operation with a 503 until it is back (database.ts).
 */
export class PgStateStore implements StateStore {
  readonly backend = 'postgres';
  readonly responses: PgResponses;
  readonly speechJobs: PgSpeechJobs;
  readonly #db: PgDatabase;

  private constructor(db: PgDatabase, options: StateStoreOptions) {
    this.#db = db;
    this.responses = new PgResponses(db, options);
    this.speechJobs = new PgSpeechJobs(db, options);
  }

  static async open(url: string, options: StateStoreOptions, pool: Partial<PgPoolOptions> = {}): Promise<PgStateStore> {
    checkResponseStoreOptions(options);
    const log = options.log ?? ((message: string) => process.stderr.write(`${message}\n`));
    const db = new PgDatabase(url, { ...pool, log });
    try {
      await migrate(db);
      const store = new PgStateStore(db, options);
      await store.responses.retain();
      db.serving();
      return store;
    } catch (error) {
      await db.close();
      throw error;
    }
  }

  async ping(): Promise<void> {
    await this.#db.read((db) => db.query('SELECT 1'));
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}
