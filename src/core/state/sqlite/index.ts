import type Database from 'better-sqlite3';
import { openDatabase } from './database.js';
import { ResponseStore } from './responses.js';
import { SqliteSpeechJobs } from './speech-jobs.js';
import { checkResponseStoreOptions } from '../responses.js';
import type { ResponseRepository, SpeechJobRepository, StateStore, StateStoreOptions } from '../store.js';

/**
 * The state store in one SQLite file (`<home>/responses.db`): the default,
 * for one machine (several lserve processes on one home share it too).
 * Its parts are synchronous — a few tenths of a millisecond a call, see
 * responses.ts — and are answered here as settled promises.
 */
export class SqliteStateStore implements StateStore {
  readonly backend = 'sqlite';
  readonly responses: ResponseRepository;
  readonly speechJobs: SpeechJobRepository;
  readonly #db: Database.Database;

  private constructor(db: Database.Database, store: ResponseStore, jobs: SqliteSpeechJobs) {
    this.#db = db;
    this.responses = {
      put: (entry) => settle(() => store.put(entry)),
      get: (id) => settle(() => store.get(id)),
      delete: (id) => settle(() => store.delete(id)),
      inputItems: (id, page) => settle(() => store.inputItems(id, page)),
      conversation: (id) => settle(() => store.conversation(id)),
    };
    this.speechJobs = {
      create: (job) => settle(() => jobs.create(job)),
      claim: (token) => settle(() => jobs.claim(token)),
      unclaimed: (tokens) => settle(() => jobs.unclaimed(tokens)),
      sweep: () => settle(() => jobs.sweep()),
    };
  }

  static open(file: string | ':memory:', options: StateStoreOptions): SqliteStateStore {
    checkResponseStoreOptions(options);
    const log = options.log ?? ((message: string) => process.stderr.write(`${message}\n`));
    const db = openDatabase(file, log, options.now ?? Date.now);
    try {
      return new SqliteStateStore(db, new ResponseStore(db, options), new SqliteSpeechJobs(db, options));
    } catch (error) {
      db.close();
      throw error;
    }
  }

  ping(): Promise<void> {
    return settle(() => void this.#db.prepare('SELECT 1').get());
  }

  close(): Promise<void> {
    return settle(() => void this.#db.close());
  }
}

/** `run()`'s result, or what it threw, as a settled promise. */
function settle<T>(run: () => T): Promise<T> {
  try {
    return Promise.resolve(run());
  } catch (error) {
    return Promise.reject(error);
  }
}
