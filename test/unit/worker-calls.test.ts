import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkerCalls } from '../../src/runtimes/worker/worker-calls.js';

/**
 * WorkerCalls over a real worker thread speaking its protocol: replies
 * matched to calls by id whatever their order, updates before a reply, the
 * worker's errors, and — the path every worker client relies on — a worker
 * that dies failing every call in flight and every call after it.
 */

const BODY = `
const { parentPort } = require('node:worker_threads');
const held = [];
parentPort.on('message', (msg) => {
  if (msg.type === 'echo') parentPort.postMessage({ id: msg.id, ok: true, result: msg.value });
  else if (msg.type === 'count') {
    for (let i = 0; i < msg.to; i++) parentPort.postMessage({ id: msg.id, update: i });
    parentPort.postMessage({ id: msg.id, ok: true, result: 'counted' });
  } else if (msg.type === 'refuse') parentPort.postMessage({ id: msg.id, ok: false, error: 'no such speaker', param: 'voice' });
  // Answered only by the next 'release', newest first: replies out of order.
  else if (msg.type === 'hold') held.push(msg.id);
  else if (msg.type === 'release') {
    for (const id of held.reverse()) parentPort.postMessage({ id, ok: true, result: id });
    held.length = 0;
    parentPort.postMessage({ id: msg.id, ok: true });
  } else if (msg.type === 'die') process.exit(3);
  else if (msg.type === 'throw') setTimeout(() => { throw new Error('worker fault'); });
});
`;

class CallError extends Error {
  constructor(
    message: string,
    readonly param?: string,
  ) {
    super(message);
  }
}

let calls: WorkerCalls | undefined;
afterEach(async () => {
  await calls?.terminate();
  calls = undefined;
});

function start(): WorkerCalls {
  calls = new WorkerCalls(new Worker(BODY, { eval: true }), { exited: 'the test worker exited', error: (message, param) => new CallError(message, param) });
  return calls;
}

describe('WorkerCalls', () => {
  it('resolves each call with its own reply, whatever order the replies come in', async () => {
    const worker = start();
    const first = worker.call<number>({ type: 'hold' });
    const second = worker.call<number>({ type: 'hold' });
    const echoed = worker.call<{ a: number[] }>({ type: 'echo', value: { a: [1, 2] } });
    await worker.call({ type: 'release' });
    const [one, two] = await Promise.all([first, second]);
    expect(one).toBeLessThan(two);
    expect(await echoed).toEqual({ a: [1, 2] });
  });

  it('hands a call its updates, in order, before its result', async () => {
    const worker = start();
    const updates: number[] = [];
    const result = await worker.call<string, number>({ type: 'count', to: 4 }, [], (n) => updates.push(n));
    expect(updates).toEqual([0, 1, 2, 3]);
    expect(result).toBe('counted');
  });

  it("rejects a refused call with the client's error, naming the field at fault", async () => {
    const worker = start();
    const refused = await worker.call({ type: 'refuse' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(CallError);
    expect(refused).toMatchObject({ message: 'no such speaker', param: 'voice' });
    expect(await worker.call({ type: 'echo', value: 7 })).toBe(7);
  });

  it('fails every call in flight when the worker exits, and every call after it', async () => {
    const worker = start();
    const waiting = [worker.call({ type: 'hold' }), worker.call({ type: 'hold' })];
    const died = worker.call({ type: 'die' });
    for (const call of [...waiting, died]) await expect(call).rejects.toThrow(new CallError('the test worker exited'));
    await expect(worker.call({ type: 'echo', value: 1 })).rejects.toThrow('the test worker exited');
  });

  it("fails the calls in flight with the worker's own error when it throws", async () => {
    const worker = start();
    const waiting = worker.call({ type: 'hold' });
    void worker.call({ type: 'throw' }).catch(() => undefined);
    await expect(waiting).rejects.toThrow('worker fault');
    await expect(worker.call({ type: 'echo', value: 1 })).rejects.toThrow('worker fault');
  });

  it('close sends the last message, answers what it held, then ends the worker', async () => {
    const worker = start();
    const held = worker.call<number>({ type: 'hold' });
    await worker.close({ type: 'release' });
    expect(await held).toBeGreaterThan(0);
    await expect(worker.call({ type: 'echo', value: 1 })).rejects.toThrow('the test worker exited');
  });

  it('rejects only the call whose message cannot be sent', async () => {
    const worker = start();
    await expect(worker.call({ type: 'echo', value: () => 1 })).rejects.toThrow(/could not be cloned/);
    expect(await worker.call({ type: 'echo', value: 'still here' })).toBe('still here');
  });
});
