import pg from 'pg';
import { isLserveError, UnavailableError } from '../../errors.js';

/**
 * The connection pool to the PostgreSQL state database, and what an outage
 * looks like from above: every operation that cannot reach the database
 * rejects with a 503 UnavailableError (Retry-After), never with a 500
 * and never by ending the process; the pool opens fresh connections for the
 * next request, so service resumes by itself when the database is back. The
 * store logs the outage once when it starts and once when it ends.
 *
 * A read that fails on a pooled connection that dropped under it (the
 * server restarted, a proxy cut an idle connection) is tried again: the dead
 * connection is discarded, and so are the others that went with it as the
 * next tries find them, until one works or a new connection cannot be made
 * (then it is an outage). Writes are not retried: a lost COMMIT reply leaves
 * their outcome unknown.
 */

export interface PgPoolOptions {
  /** Most connections this replica opens (default 10). */
  max?: number;
  log: (message: string) => void;
}

export const DEFAULT_POOL_MAX = 10;
/** How long to wait for a connection, and how long one statement may run (server side, then client side). */
const CONNECT_TIMEOUT_MS = 5_000;
const STATEMENT_TIMEOUT_MS = 10_000;
const QUERY_TIMEOUT_MS = STATEMENT_TIMEOUT_MS + 5_000;
/** A replica that stalls inside a transaction must not hold its locks for longer. */
const IDLE_IN_TRANSACTION_MS = 30_000;
const RETRY_AFTER_SECONDS = 2;

export type Queryable = Pick<pg.Pool, 'query'>;

export class PgDatabase {
  readonly #pool: pg.Pool;
  readonly #log: (message: string) => void;
  readonly #max: number;
  #down = false;
  /** Until the store is open, a failure fails the start, which says so itself: nothing to log. */
  #serving = false;

  constructor(url: string, options: PgPoolOptions) {
    this.#log = options.log;
    this.#max = options.max ?? DEFAULT_POOL_MAX;
    this.#pool = new pg.Pool({
      connectionString: url,
      max: this.#max,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      idleTimeoutMillis: 30_000,
      statement_timeout: STATEMENT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
      application_name: 'lserve',
      keepAlive: true,
    });
    // An idle connection the server closed (a restart, a proxy's timeout) is reported here; unheard, it would end
    // the process. The pool has already dropped it; the next query opens another or answers 503.
    this.#pool.on('error', () => {});
  }

  /** Runs `read` (queries on the pool); again when a connection dropped under it, at most once per pooled connection. */
  async read<T>(read: (db: Queryable) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return this.#up(await read(this.#pool));
      } catch (error) {
        if (!isDropped(error) || attempt >= this.#max) throw this.#failure(error);
      }
    }
  }

  /** One statement, on its own (autocommit), not retried. */
  async query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      return this.#up(await this.#pool.query<R>(text, values));
    } catch (error) {
      throw this.#failure(error);
    }
  }

  /** Runs `work` in one transaction on one connection: committed whole, or rolled back. */
  async transaction<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (error) {
      throw this.#failure(error);
    }
    // A checked-out connection that dies between two statements emits 'error' on the client, which nobody else hears.
    let broken: Error | undefined;
    const onError = (error: Error) => (broken = error);
    client.on('error', onError);
    try {
      await client.query('BEGIN');
      const result = await work(client);
      await client.query('COMMIT');
      return this.#up(result);
    } catch (error) {
      if (!broken && isUnavailable(error)) broken = error as Error;
      // On a live connection the transaction is rolled back here; on a dead one the server already did.
      if (!broken) await client.query('ROLLBACK').catch((rollback: Error) => (broken = rollback));
      throw this.#failure(error);
    } finally {
      client.off('error', onError);
      // A broken connection is closed, not handed to the next request.
      client.release(broken);
    }
  }

  /** The store is open: outages from now on are logged as they begin and end. */
  serving(): void {
    this.#serving = true;
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }

  #up<T>(result: T): T {
    if (this.#down) {
      this.#down = false;
      this.#log('The PostgreSQL state database is reachable again.');
    }
    return result;
  }

  /** What the caller sees of `error`: a 503 for an outage, itself otherwise (a 400 of ours, or a real fault). */
  #failure(error: unknown): unknown {
    if (isLserveError(error) || !isUnavailable(error)) return error;
    if (!this.#down && this.#serving) {
      this.#down = true;
      this.#log(`The PostgreSQL state database is unreachable (${describe(error)}): requests that need it are answered 503 until it is back.`);
    }
    return new UnavailableError('The server cannot reach its state database right now; retry shortly.', {
      code: 'database_unavailable',
      cause: error,
      retryAfterSeconds: RETRY_AFTER_SECONDS,
    });
  }
}

/** Node's errors for a connection that could not be made or was lost. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE', 'ENOENT']);
/**
 * SQLSTATEs of an unavailable server: class 08 (connection exception), the
 * server shutting down or starting (57P01-57P03), too many connections
 * (53300), and a statement cancelled by statement_timeout (57014).
 */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300', '57014']);
/** SQLSTATEs and Node codes of a connection that was up and dropped: a fresh one may well work. */
const DROPPED_CODES = new Set(['57P01', '57P02', 'ECONNRESET', 'EPIPE']);
/** pg's own errors carry no code, only these messages. */
const PG_CONNECTION_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error)/;

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

export function isUnavailable(error: unknown): boolean {
  const code = codeOf(error);
  if (code && (NETWORK_CODES.has(code) || UNAVAILABLE_STATES.has(code) || code.startsWith('08'))) return true;
  if (error instanceof AggregateError) return error.errors.some(isUnavailable);
  return error instanceof Error && PG_CONNECTION_MESSAGES.test(error.message);
}

function isDropped(error: unknown): boolean {
  const code = codeOf(error);
  return (code !== undefined && DROPPED_CODES.has(code)) || (error instanceof Error && /^Connection terminated unexpectedly/.test(error.message));
}

/** A short cause for the log: a code and pg's or Node's message (neither carries the password). */
function describe(error: unknown): string {
  const code = codeOf(error);
  const message = error instanceof Error ? error.message : String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}
