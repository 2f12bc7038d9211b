/**
 * A process that stores big responses in a loop until it is killed, for the
 * response store's crash test (run with `node --import tsx`):
 *
 *   response-writer.ts FILE MAX_RESPONSES
 *
 * Each response records in its body how many input and output items it was
 * written with, so a reader can tell a whole response from a torn one. Prints
 * "stored <n>" after each put.
 */
import { ResponseStore } from '../../src/core/state/sqlite/responses.js';

const [file, maxResponses] = process.argv.slice(2);
const store = ResponseStore.open(file!, { ttlSeconds: Infinity, maxResponses: Number(maxResponses), maxBytesPerResponse: 64 * 1024 * 1024 });
const filler = 'x'.repeat(8 * 1024);

for (let n = 0; ; n++) {
  const id = `resp_${process.pid}_${n}`;
  // 40 to 120 input items of 8 kB: a put of up to 1 MB, long enough to be killed in the middle of.
  const inputCount = 40 + (n % 81);
  const outputCount = 1 + (n % 3);
  store.put({
    id,
    model: 'writer',
    createdAt: Math.floor(Date.now() / 1000),
    previousResponseId: null,
    input: Array.from({ length: inputCount }, (_, i) => ({ id: `${id}_in_${i}`, type: 'message', role: 'user', content: filler })),
    output: Array.from({ length: outputCount }, (_, i) => ({ id: `${id}_out_${i}`, type: 'message', content: filler })),
    response: { id, inputCount, outputCount },
  });
  process.stdout.write(`stored ${n}\n`);
}
