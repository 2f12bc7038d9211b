import path from 'node:path';
import { SqliteStateStore } from './sqlite/index.js';
import type { ResponseStoreOptions, StateStore, StateStoreOptions } from './store.js';

/** OpenAI keeps stored responses 30 days; the count and size bounds keep the store from growing without end. */
export const RESPONSE_STORE_DEFAULTS: ResponseStoreOptions = { ttlSeconds: 30 * 24 * 3600, maxResponses: 10_000, maxBytesPerResponse: 10 * 1024 * 1024 };

export interface StateLocation {
  /** The lserve home: the SQLite store is `<home>/responses.db`. */
  home: string;
  /** A `postgres://` URL: the store is that database instead (several replicas share it). */
  databaseUrl?: string;
  /** Most connections to it (PostgreSQL only). */
  poolMax?: number;
}

/**
 * Checks a `--database-url` before anything connects: a postgres:// or
 * postgresql:// URL. The message never repeats the URL, which may hold a password.
 */
export function checkDatabaseUrl(url: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error('the database URL is not a URL: give postgres://USER:PASSWORD@HOST:PORT/DATABASE');
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new Error(`the database URL must start with postgres:// or postgresql://, not ${parsed.protocol}//`);
  }
}

/** `url` with its password masked, for logs. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    // libpq's URLs may carry it as a parameter too.
    if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
    return parsed.toString();
  } catch {
    return '(a database URL that does not parse)';
  }
}

/** The server's state store: PostgreSQL when a URL is given, else SQLite in the home. */
export async function openStateStore(location: StateLocation, options: StateStoreOptions): Promise<StateStore> {
  if (location.databaseUrl) {
    // Loaded only when asked for: a one-machine server never loads pg.
    const { PgStateStore } = await import('./postgres/index.js');
    try {
      return await PgStateStore.open(location.databaseUrl, options, { max: location.poolMax });
    } catch (error) {
      // What failed is told by pg's or Node's message (the cause of a 503), which never holds the password.
      const reason = error instanceof Error && error.cause instanceof Error ? error.cause.message : (error as Error).message;
      throw new Error(`Cannot open the state database ${redactUrl(location.databaseUrl)}: ${reason}`, { cause: error });
    }
  }
  return SqliteStateStore.open(path.join(location.home, 'responses.db'), options);
}
