import { randomUUID } from 'node:crypto';
import type { SpeechFormat } from '../api/speech.js';
import type { SpeechJobRepository } from '../core/state/store.js';
import type { PreparedSpeech } from '../core/tasks/speak.js';
import { MAX_PENDING_SPEECH_JOBS, SPEECH_JOB_TTL_MS, SpeechJobs, type SpeechJob } from './speech-jobs.js';

/**
 * Speech stream jobs that any replica can serve. The replica that takes the
 * POST prepares the speech (so a bad voice is a 400 there and then), stores
 * the validated request in the state store and parks the prepared speech in
 * memory; the replica that takes the GET claims the job in the store — once,
 * over all replicas, never after it expired — and streams the speech parked
 * here when there is one (one machine: no second load, no added latency), or
 * else prepares it again from the stored request, loading the model itself.
 *
 * A speech parked here holds its model lease until it is claimed, expires,
 * or is found claimed by another replica: while any is parked, the store is
 * asked every `checkMs` which tokens still wait, and the others are released.
 */

/** How often parked speeches are checked against the store, and how often expired jobs are swept from it. */
const CHECK_MS = 2_000;
const SWEEP_MS = 60_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Makes the speech of a stored request (the route's own preparation, from validation on). */
export type PrepareStored = (request: unknown, signal: AbortSignal) => Promise<SpeechJob>;

export interface ClaimedSpeechJob {
  /** The speech to stream: the one parked here, or one prepared again from the stored request. */
  prepare(signal: AbortSignal): Promise<SpeechJob>;
}

export interface SpeechStreamJobsOptions {
  ttlMs?: number;
  maxPending?: number;
  checkMs?: number;
  /** The clock for expiry, in ms; the store's must be the same (default `Date.now`). */
  now?: () => number;
}

export class SpeechStreamJobs {
  readonly #store: SpeechJobRepository;
  readonly #prepareStored: PrepareStored;
  readonly #parked: SpeechJobs;
  readonly #ttlMs: number;
  readonly #checkMs: number;
  readonly #now: () => number;
  /** Tokens this replica is claiming: the check leaves their parked speech alone. */
  readonly #claiming = new Set<string>();
  readonly #sweeper: NodeJS.Timeout;
  #checker: NodeJS.Timeout | undefined;

  constructor(store: SpeechJobRepository, prepareStored: PrepareStored, options: SpeechStreamJobsOptions = {}) {
    this.#store = store;
    this.#prepareStored = prepareStored;
    this.#ttlMs = options.ttlMs ?? SPEECH_JOB_TTL_MS;
    this.#checkMs = options.checkMs ?? CHECK_MS;
    this.#now = options.now ?? Date.now;
    this.#parked = new SpeechJobs(this.#ttlMs, options.maxPending ?? MAX_PENDING_SPEECH_JOBS);
    // Jobs nobody fetched would otherwise stay in the store until the next creation; a store that is down is retried next time.
    this.#sweeper = setInterval(() => void this.#store.sweep().catch(() => {}), SWEEP_MS);
    this.#sweeper.unref();
  }

  /**
   * Stores the job of `request` (validated, the reference audio inline) and
   * parks `speech`, prepared from it; returns its token. The speech is
   * released when the job cannot be stored (a 503: too many jobs, or the store down).
   */
  async create(speech: PreparedSpeech, format: SpeechFormat, request: unknown): Promise<string> {
    const token = randomUUID();
    try {
      await this.#store.create({ token, model: speech.model, request, expiresAt: this.#now() + this.#ttlMs });
    } catch (error) {
      speech.release();
      throw error;
    }
    try {
      this.#parked.create({ speech, format }, token);
    } catch {
      // No room here (speeches claimed elsewhere not yet noticed): the job is stored, and its GET prepares it again.
      speech.release();
    }
    this.#watch();
    return token;
  }

  /** The job `token`, taken from the store; undefined when there is none (fetched, expired, never made). */
  async claim(token: string): Promise<ClaimedSpeechJob | undefined> {
    // Tokens are UUIDs: anything else names no job, and need not reach the store.
    if (!UUID.test(token)) return undefined;
    this.#claiming.add(token);
    let record;
    try {
      record = await this.#store.claim(token);
    } finally {
      this.#claiming.delete(token);
    }
    const parked = this.#parked.claim(token);
    if (!record) {
      parked?.speech.release();
      return undefined;
    }
    if (parked) return { prepare: () => Promise.resolve(parked) };
    return { prepare: (signal) => this.#prepareStored(record.request, signal) };
  }

  /** Releases every parked speech and stops the timers (server shutdown); the stored jobs stay for other replicas. */
  close(): void {
    clearInterval(this.#sweeper);
    clearInterval(this.#checker);
    this.#checker = undefined;
    this.#parked.close();
  }

  #watch(): void {
    if (this.#checker) return;
    this.#checker = setInterval(() => void this.#releaseClaimedElsewhere(), this.#checkMs);
    this.#checker.unref();
  }

  /** Releases the parked speeches whose jobs another replica claimed (or that expired in the store). */
  async #releaseClaimedElsewhere(): Promise<void> {
    const parked = this.#parked.tokens();
    if (parked.length === 0) {
      clearInterval(this.#checker);
      this.#checker = undefined;
      return;
    }
    const tokens = parked.filter((token) => !this.#claiming.has(token));
    let waiting: Set<string>;
    try {
      waiting = await this.#store.unclaimed(tokens);
    } catch {
      // The store is down: keep them; their expiry still releases them.
      return;
    }
    for (const token of tokens) {
      if (!waiting.has(token) && !this.#claiming.has(token)) this.#parked.claim(token)?.speech.release();
    }
  }
}
