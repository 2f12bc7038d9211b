import { OverloadedError } from '../errors.js';

/** What both backends answer when `maxPendingSpeechJobs` jobs wait already. */
export function tooManySpeechJobs(pending: number): OverloadedError {
  return new OverloadedError(`${pending} speech stream jobs are waiting to be fetched; fetch or let them expire first.`);
}
