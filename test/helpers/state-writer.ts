/**
 * A process that begins a multi-row write and stops in the middle of its
 * transaction, for the state store's crash test (run with `node --import tsx`):
 *
 *   state-writer.ts sqlite FILE | postgres URL
 *
 * It stores `resp_whole`, prints "stored", then starts storing `resp_torn`
 * and, between its input and its output items, prints "mid-put" and blocks
 * until it is killed.
 */
import { writeSync } from 'node:fs';
import { PgStateStore } from '../../src/core/state/postgres/index.js';
import { SqliteStateStore } from '../../src/core/state/sqlite/index.js';
import type { StateStoreOptions, StoredResponse } from '../../src/core/state/store.js';

const [backend, location] = process.argv.slice(2);
let stop = false;
const options: StateStoreOptions = {
  ttlSeconds: Infinity,
  maxResponses: 1000,
  maxBytesPerResponse: 64 * 1024 * 1024,
  maxPendingSpeechJobs: 10,
  midPut: () => {
    if (!stop) return;
    writeSync(1, 'mid-put\n');
    // Blocks the whole process, event loop included: nothing of this transaction can finish.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  },
};
const store = backend === 'postgres' ? await PgStateStore.open(location!, options) : SqliteStateStore.open(location!, options);

const response = (id: string): StoredResponse => ({
  id,
  model: 'writer',
  createdAt: 1_700_000_000,
  previousResponseId: null,
  input: Array.from({ length: 20 }, (_, i) => ({ id: `${id}_in_${i}`, type: 'message', role: 'user', content: 'x'.repeat(1000) })),
  output: Array.from({ length: 5 }, (_, i) => ({ id: `${id}_out_${i}`, type: 'message', content: 'y'.repeat(1000) })),
  response: { id },
});

await store.responses.put(response('resp_whole'));
writeSync(1, 'stored\n');
stop = true;
await store.responses.put(response('resp_torn'));
writeSync(1, 'the put finished, which it must not\n');
