import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStateStore } from '../../src/core/state/sqlite/index.js';
import type { PreparedSpeech } from '../../src/core/tasks/speak.js';
import { SpeechStreamJobs, type PrepareStored } from '../../src/http/speech-stream-jobs.js';

/**
 * Speech stream jobs over a shared state store, two SpeechStreamJobs on one
 * store standing for two replicas: the replica that took the POST streams the
 * speech it parked; another replica claims the job and prepares the speech
 * again from the stored request, and the first one then lets its parked
 * speech (and its model lease) go.
 */

const speech = () => {
  const parked = { model: 'piper-test', released: 0, release: () => void parked.released++ };
  return parked as unknown as PreparedSpeech & { released: number };
};
const REQUEST = { model: 'piper-test', input: 'Hello there.', voice: 'lessac', ref_audio: 'data:;base64,UklGRg==' };
const signal = new AbortController().signal;

describe('SpeechStreamJobs', () => {
  let store: SqliteStateStore;
  let prepared: unknown[];
  const jobs: SpeechStreamJobs[] = [];
  /** A replica: its own parked speeches, the shared store; it records the stored requests it prepares again. */
  const replica = (options: { ttlMs?: number; checkMs?: number } = {}) => {
    const prepareStored: PrepareStored = async (request) => {
      prepared.push(request);
      return { speech: speech(), format: 'wav' };
    };
    const made = new SpeechStreamJobs(store.speechJobs, prepareStored, options);
    jobs.push(made);
    return made;
  };

  beforeEach(() => {
    store = SqliteStateStore.open(':memory:', { ttlSeconds: 3600, maxResponses: 10, maxBytesPerResponse: 1e6, maxPendingSpeechJobs: 2 });
    prepared = [];
  });
  afterEach(async () => {
    for (const made of jobs.splice(0)) made.close();
    await store.close();
  });

  it('streams the speech parked on the replica that took the POST, preparing nothing again, once', async () => {
    const a = replica();
    const parked = speech();
    const token = await a.create(parked, 'mp3', REQUEST);
    const job = await (await a.claim(token))!.prepare(signal);
    expect(job).toEqual({ speech: parked, format: 'mp3' });
    expect(prepared).toEqual([]);
    expect(await a.claim(token)).toBeUndefined();
    expect(parked.released).toBe(0);
  });

  it('prepares the speech again from the stored request on another replica; the first releases its parked speech', async () => {
    const a = replica({ checkMs: 10 });
    const b = replica({ checkMs: 10 });
    const parked = speech();
    const token = await a.create(parked, 'wav', REQUEST);
    const job = await (await b.claim(token))!.prepare(signal);
    expect(prepared).toEqual([REQUEST]);
    expect(job.speech).not.toBe(parked);
    for (let waited = 0; parked.released === 0 && waited < 2000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(parked.released).toBe(1);
    expect(await a.claim(token)).toBeUndefined();
    expect(parked.released).toBe(1);
  });

  it('hands out no expired job, on any replica, and releases the parked speech', async () => {
    const a = replica({ ttlMs: 30 });
    const b = replica({ ttlMs: 30 });
    const parked = speech();
    const token = await a.create(parked, 'wav', REQUEST);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(await b.claim(token)).toBeUndefined();
    expect(await a.claim(token)).toBeUndefined();
    expect(parked.released).toBe(1);
  });

  it('releases the speech of a job the store refuses (503), and knows no token that is not a UUID', async () => {
    const a = replica();
    await a.create(speech(), 'wav', REQUEST);
    await a.create(speech(), 'wav', REQUEST);
    const refused = speech();
    await expect(a.create(refused, 'wav', REQUEST)).rejects.toMatchObject({ status: 503 });
    expect(refused.released).toBe(1);
    for (const token of ['not-a-uuid', '../../health', '']) expect(await a.claim(token)).toBeUndefined();
  });
});
