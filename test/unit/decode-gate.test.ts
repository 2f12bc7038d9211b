import { describe, expect, it } from 'vitest';
import { LockStepGate } from '../../src/runtimes/llama/decode-gate.js';
import { pickSlot } from '../../src/families/llama/slot-choice.js';

/**
 * The lock-step gate in front of node-llama-cpp's decode queue, driven by a
 * fake decoder whose results the test hands back one by one: what reaches
 * the decoder, when, and in which order.
 */

function fakeDecoder() {
  const started: number[] = [];
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  const decode = (request: { sequenceId: number }) =>
    new Promise<unknown>((resolve, reject) => {
      started.push(request.sequenceId);
      pending.set(request.sequenceId, { resolve, reject });
    });
  /** Delivers sequence `id`'s result and lets its consumer run (as sampling's promise would). */
  const finish = async (id: number) => {
    pending.get(id)!.resolve(`token for ${id}`);
    pending.delete(id);
    await Promise.resolve();
  };
  return { decode, started, finish, pending };
}

const tick = () => new Promise((r) => setImmediate(r));

/** Runs one decode for each of `ids` together and delivers every result: all are now expected back. */
async function decodedTogether(gate: LockStepGate, d: ReturnType<typeof fakeDecoder>, ids: number[]): Promise<void> {
  for (const id of ids) void gate.request({ sequenceId: id }, []);
  await tick();
  d.started.length = 0;
  for (const id of ids) await d.finish(id);
}

describe('LockStepGate', () => {
  it('passes a lone sequence straight through, step after step', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    for (let step = 0; step < 3; step++) {
      const result = gate.request({ sequenceId: 0 }, []);
      await tick();
      expect(d.started).toHaveLength(step + 1); // not held
      await d.finish(0);
      await expect(result).resolves.toBe('token for 0');
    }
  });

  it('holds the first sequences back until the last of the group returns, then queues all in ascending id order', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    // Three sequences start together (their prompts): one group.
    for (const id of [2, 0, 1]) void gate.request({ sequenceId: id }, []);
    await tick();
    expect(d.started).toEqual([0, 1, 2]);
    d.started.length = 0;

    // Results come back at different moments; each consumer asks for its next token at once.
    await d.finish(1);
    void gate.request({ sequenceId: 1 }, []);
    await d.finish(2);
    void gate.request({ sequenceId: 2 }, []);
    await tick();
    expect(d.started).toEqual([]); // sequence 0 is still being decoded
    await d.finish(0);
    void gate.request({ sequenceId: 0 }, []);
    await tick();
    expect(d.started).toEqual([0, 1, 2]);
  });

  it('parks a paused sequence\'s next decode until the pause ends, and the others do not wait for it meanwhile', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    await decodedTogether(gate, d, [0, 1]);
    let resume!: () => void;
    gate.pause(0, new Promise<void>((r) => (resume = r)));
    const paused = gate.request({ sequenceId: 0 }, []);
    void gate.request({ sequenceId: 1 }, []);
    await tick();
    // Sequence 1 goes alone at once (not after the 1000 ms wait for a straggler); 0 waits.
    expect(d.started).toEqual([1]);
    await d.finish(1);
    void gate.request({ sequenceId: 1 }, []);
    await tick();
    expect(d.started).toEqual([1, 1]);
    resume();
    await tick();
    await tick();
    // Resumed, it joins the next group: after sequence 1's decode in flight, beside its next.
    expect(d.started).toEqual([1, 1]);
    await d.finish(1);
    void gate.request({ sequenceId: 1 }, []);
    await tick();
    expect(d.started).toEqual([1, 1, 0, 1]);
    await d.finish(0);
    await expect(paused).resolves.toBe('token for 0');
  });

  it('stops waiting for a sequence whose generation ended (leave)', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    await decodedTogether(gate, d, [0, 1]);
    void gate.request({ sequenceId: 1 }, []); // 0 got its last token and never asks again
    await tick();
    expect(d.started).toEqual([]);
    gate.leave(0);
    await tick();
    expect(d.started).toEqual([1]);
  });

  it('lets the group go without a straggler after maxWaitMs, and does not wait for it again', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 30);
    await decodedTogether(gate, d, [0, 1]);
    void gate.request({ sequenceId: 0 }, []); // 1 is slow to come back
    await new Promise((r) => setTimeout(r, 5));
    expect(d.started).toEqual([]);
    await new Promise((r) => setTimeout(r, 60));
    expect(d.started).toEqual([0]);

    await d.finish(0);
    void gate.request({ sequenceId: 0 }, []); // the straggler is no longer awaited
    await tick();
    expect(d.started).toEqual([0, 0]);
  });

  it('a new request waits for the decode in flight and joins the next group', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    void gate.request({ sequenceId: 0 }, []);
    await tick();
    void gate.request({ sequenceId: 3 }, []); // a new prompt while 0 decodes
    await tick();
    expect(d.started).toEqual([0]);
    await d.finish(0);
    void gate.request({ sequenceId: 0 }, []);
    await tick();
    expect(d.started).toEqual([0, 0, 3]);
  });

  it('does not hold generating sequences while a long prompt is evaluated', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    await decodedTogether(gate, d, [0]);
    void gate.request({ sequenceId: 1, tokens: Array(2000).fill(7) }, []); // a long prompt
    void gate.request({ sequenceId: 0, tokens: [42] }, []);
    await tick();
    expect(d.started).toEqual([0, 1]);
    await d.finish(0);
    void gate.request({ sequenceId: 0, tokens: [43] }, []); // the prompt is still being evaluated
    await tick();
    expect(d.started).toEqual([0, 1, 0]);
    // Once its prompt is done, sequence 1 is a generating sequence like the others.
    await d.finish(1);
    await d.finish(0);
    void gate.request({ sequenceId: 0, tokens: [44] }, []);
    await tick();
    expect(d.started).toEqual([0, 1, 0]);
    void gate.request({ sequenceId: 1, tokens: [45] }, []);
    await tick();
    expect(d.started).toEqual([0, 1, 0, 0, 1]);
  });

  it('does not wait for a sequence whose decode failed', async () => {
    const d = fakeDecoder();
    const gate = new LockStepGate(d.decode, 1000);
    const failing = gate.request({ sequenceId: 0 }, []);
    void gate.request({ sequenceId: 1 }, []);
    await tick();
    d.started.length = 0;
    d.pending.get(0)!.reject(new Error('decode failed'));
    await expect(failing).rejects.toThrow('decode failed');
    await d.finish(1);
    void gate.request({ sequenceId: 1 }, []);
    await tick();
    expect(d.started).toEqual([1]);
  });
});

describe('pickSlot', () => {
  const slot = (index: number, held: string[] = []) => ({ index, held });

  it('prefers the slot holding the longest prefix of the conversation', () => {
    const free = [slot(0, ['a']), slot(3, ['a', 'b']), slot(1, ['x'])];
    expect(pickSlot(free, ['a', 'b', 'c']).index).toBe(3);
  });

  it('among equals takes the lowest sequence, so busy sequences stay consecutive', () => {
    expect(pickSlot([slot(3), slot(1), slot(2)], ['a']).index).toBe(1);
    expect(pickSlot([slot(2, ['x']), slot(0, ['y'])], ['a']).index).toBe(0);
  });

  it('gives a new conversation an empty slot, else the least recently used, so conversations in progress keep theirs', () => {
    const used = (index: number, held: string[], lastUsed: number) => ({ index, held, lastUsed });
    expect(pickSlot([used(0, ['x'], 5), used(1, [], 0), used(2, ['y'], 1)], ['a']).index).toBe(1);
    expect(pickSlot([used(0, ['x'], 5), used(1, ['y'], 9), used(2, ['z'], 3)], ['a']).index).toBe(2);
    // A shared prefix still wins over age.
    expect(pickSlot([used(0, ['a'], 9), used(1, [], 0)], ['a', 'b']).index).toBe(0);
  });
});
