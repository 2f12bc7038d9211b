import { describe, expect, it } from 'vitest';
import { OverloadedError } from '../../src/core/errors.js';
import { JobQueue } from '../../src/core/job-queue.js';

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('JobQueue', () => {
  it('runs one job at a time in arrival order, refuses beyond the line, and lets a waiting job leave', async () => {
    const queue = new JobQueue(2, 'test model');
    const order: string[] = [];
    const gate = deferred();
    const first = queue.run(async () => {
      order.push('first');
      await gate.promise;
    });
    const controller = new AbortController();
    const leaving = queue.run(async () => order.push('leaving'), controller.signal);
    const second = queue.run(async () => order.push('second'));
    expect(queue.length).toBe(2);
    await expect(queue.run(async () => order.push('third'))).rejects.toBeInstanceOf(OverloadedError);
    controller.abort(new Error('client gone'));
    await expect(leaving).rejects.toThrow('client gone');
    expect(queue.length).toBe(1);
    gate.resolve();
    await Promise.all([first, second]);
    expect(order).toEqual(['first', 'second']);
    expect(queue.busy).toBe(false);
  });

  it('admits work done in turns once: admit() refuses a full line, and admitted parts wait however long it is', async () => {
    const queue = new JobQueue(1, 'test model');
    expect(() => queue.admit()).not.toThrow();
    const gate = deferred();
    const order: string[] = [];
    const running = queue.run(async () => {
      order.push('running');
      await gate.promise;
    });
    expect(() => queue.admit()).not.toThrow();
    const waiting = queue.run(async () => order.push('waiting'));
    expect(() => queue.admit()).toThrow(OverloadedError);
    expect(() => queue.admit()).toThrow('test model is busy with 2 requests (1 may wait). Retry later.');
    await expect(queue.run(async () => order.push('refused'))).rejects.toBeInstanceOf(OverloadedError);
    // The next piece of a request let in earlier: it joins the line past the bound.
    const piece = queue.run(async () => order.push('piece'), undefined, true);
    expect(queue.length).toBe(2);
    gate.resolve();
    await Promise.all([running, waiting, piece]);
    expect(order).toEqual(['running', 'waiting', 'piece']);
    expect(queue.length).toBe(0);
    expect(() => queue.admit()).not.toThrow();
  });

  it('moves on after a job fails', async () => {
    const queue = new JobQueue(1, 'test model');
    const failing = queue.run(async () => {
      throw new Error('boom');
    });
    const next = queue.run(async () => 'ok');
    await expect(failing).rejects.toThrow('boom');
    await expect(next).resolves.toBe('ok');
  });
});
