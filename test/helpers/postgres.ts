import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, readdirSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './free-port.js';

/**
 * A PostgreSQL server for the state store's tests: a throwaway cluster in a
 * temporary directory (initdb, pg_ctl) on a free loopback port, or the
 * server of LSERVE_TEST_DATABASE_URL when that is set. Each test takes a
 * fresh database on it. PostgreSQL refuses to run as root: as root, the
 * cluster belongs to, and runs as, `nobody`.
 */

const run = promisify(execFile);
const EXTERNAL_URL = process.env.LSERVE_TEST_DATABASE_URL || undefined;

/** The directory of initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin (newest first). */
function findBinaries(): string | undefined {
  const onPath = (process.env.PATH ?? '').split(path.delimiter).find((dir) => dir && existsSync(path.join(dir, 'initdb')) && existsSync(path.join(dir, 'pg_ctl')));
  if (onPath) return onPath;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((name) => /^\d+$/.test(name))
    .sort((a, b) => Number(b) - Number(a));
  return versions.map((v) => path.join(root, v, 'bin')).find((dir) => existsSync(path.join(dir, 'initdb')));
}

const BIN = EXTERNAL_URL ? undefined : findBinaries();

/** Whether the PostgreSQL tests can run here. */
export const postgresAvailable = EXTERNAL_URL !== undefined || BIN !== undefined;
/** For the names of skipped suites. */
export const NEEDS_POSTGRES = 'needs PostgreSQL: apt-get install postgresql (as .ci/run does), or LSERVE_TEST_DATABASE_URL';

export interface TestPostgres {
  /** The URL of a new, empty database on the server. */
  createDatabase(): Promise<string>;
  /** Stops the server (fast shutdown: sessions are ended); undefined for an external server. */
  stop?: () => Promise<void>;
  /** Starts it again on the same port and data. */
  start?: () => Promise<void>;
  /** Drops the databases made, and stops and deletes a cluster these tests made. */
  close(): Promise<void>;
}

export async function startPostgres(): Promise<TestPostgres> {
  if (EXTERNAL_URL) return withDatabases(EXTERNAL_URL, async () => {});
  if (!BIN) throw new Error(`PostgreSQL is not installed (${NEEDS_POSTGRES})`);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-pg-'));
  const asRoot = process.getuid?.() === 0;
  const owner = asRoot ? await userIds('nobody') : undefined;
  if (owner) chownSync(dir, owner.uid, owner.gid);
  // As root, run as nobody; `runuser` keeps the environment, so the tools find their locale and libraries.
  const tool = (name: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'nobody', '--', path.join(BIN, name), ...args], { cwd: dir }) : run(path.join(BIN, name), args, { cwd: dir });
  const data = path.join(dir, 'data');
  const port = await freePort();
  const settings = `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=off -c full_page_writes=off -c synchronous_commit=off`;
  const pgCtl = (args: string[]) => tool('pg_ctl', ['-D', data, '-l', path.join(dir, 'log'), ...args]);
  try {
    await tool('initdb', ['-D', data, '-A', 'trust', '-U', 'lserve', '-E', 'UTF8', '--no-sync', '--no-instructions']);
    await pgCtl(['-o', settings, '-w', 'start']);
  } catch (error) {
    const log = await readFile(path.join(dir, 'log'), 'utf8').catch(() => '');
    await rm(dir, { recursive: true, force: true });
    throw new Error(`could not start a PostgreSQL cluster: ${(error as Error).message}\n${log}`, { cause: error });
  }
  const server = await withDatabases(`postgres://lserve@127.0.0.1:${port}/postgres`, async () => {
    await pgCtl(['-m', 'immediate', 'stop']).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  });
  server.stop = async () => void (await pgCtl(['-m', 'fast', '-w', 'stop']));
  server.start = async () => void (await pgCtl(['-o', settings, '-w', 'start']));
  return server;
}

/** Databases made on the server at `adminUrl`, dropped at close; then `shutdown`. */
async function withDatabases(adminUrl: string, shutdown: () => Promise<void>): Promise<TestPostgres> {
  const made: string[] = [];
  const admin = async <T>(work: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  };
  return {
    async createDatabase() {
      const name = `lserve_test_${randomBytes(6).toString('hex')}`;
      await admin((client) => client.query(`CREATE DATABASE ${name}`));
      made.push(name);
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      return url.toString();
    },
    async close() {
      if (made.length > 0) {
        await admin(async (client) => {
          for (const name of made) await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        }).catch(() => {});
      }
      await shutdown();
    },
  };
}

async function userIds(name: string): Promise<{ uid: number; gid: number }> {
  const [uid, gid] = await Promise.all([run('id', ['-u', name]), run('id', ['-g', name])]);
  return { uid: Number(uid.stdout), gid: Number(gid.stdout) };
}

