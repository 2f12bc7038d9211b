import { randomUUID } from 'node:crypto';
import type { SpeechFormat } from '../api/speech.js';
import { tooManySpeechJobs } from '../core/state/speech-jobs.js';
import type { PreparedSpeech } from '../core/tasks/speak.js';

/**
 * Prepared speeches parked in memory for speech stream jobs: POST
 * /v1/audio/speech with `stream: true` checks the request, loads the model
 * and parks the prepared speech under a random UUID; GET
 * /v1/audio/speech/stream/<token> claims it once and streams the audio as it
 * is synthesised. A token is single use and expires unclaimed after `ttlMs`
 * (its model lease is released then); at most `maxPending` jobs wait. These
 * are one replica's; the job itself, which any replica may serve, is in the
 * state store (speech-stream-jobs.ts).
 */

export const SPEECH_JOB_TTL_MS = 5 * 60_000;
export const MAX_PENDING_SPEECH_JOBS = 64;

export interface SpeechJob {
  speech: PreparedSpeech;
  format: SpeechFormat;
}

export class SpeechJobs {
  private readonly pending = new Map<string, SpeechJob & { timer: NodeJS.Timeout }>();

  constructor(
    private readonly ttlMs = SPEECH_JOB_TTL_MS,
    private readonly maxPending = MAX_PENDING_SPEECH_JOBS,
  ) {}

  create(job: SpeechJob, token: string = randomUUID()): string {
    if (this.pending.size >= this.maxPending) throw tooManySpeechJobs(this.pending.size);
    const timer = setTimeout(() => this.claim(token)?.speech.release(), this.ttlMs);
    timer.unref();
    this.pending.set(token, { ...job, timer });
    return token;
  }

  /** The job behind a token, removed so that it cannot be claimed again. */
  claim(token: string): SpeechJob | undefined {
    const job = this.pending.get(token);
    if (!job) return undefined;
    this.pending.delete(token);
    clearTimeout(job.timer);
    return { speech: job.speech, format: job.format };
  }

  /** The tokens of the jobs waiting. */
  tokens(): string[] {
    return [...this.pending.keys()];
  }

  /** Drops every unclaimed job (server shutdown). */
  close(): void {
    for (const token of [...this.pending.keys()]) this.claim(token)?.speech.release();
  }
}
