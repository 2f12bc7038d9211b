import type { LlamaContextSequence, Token } from 'node-llama-cpp';
import { describe, expect, it } from 'vitest';
import { ScoredPrefixes } from '../../src/families/llama/scored-prefixes.js';
import { pickSlotForTokens } from '../../src/families/llama/slot-choice.js';
import type { PositionLogprobs } from '../../src/runtimes/llama/native-logprobs.js';

const t = (...ids: number[]) => ids as Token[];
/** Positions whose numbers tell which prompt and position they came from. */
const positions = (tag: number, n: number, width = 2): PositionLogprobs[] =>
  Array.from({ length: n }, (_, i) => ({ logprob: -(tag * 100 + i), top: Array.from({ length: width }, (_, k) => ({ id: k as Token, logprob: -k })) }));

describe('ScoredPrefixes', () => {
  it('gives the positions a remembered prompt shares: those predicting shared tokens', () => {
    const known = new ScoredPrefixes();
    // Context 1 2 3 4, continuation 5 6: positions 0…4 predict tokens 1…5.
    known.remember(t(1, 2, 3, 4, 5, 6), positions(1, 5), 2);
    // Another continuation of the same context: tokens 1…4 shared, so positions 0…2 (predicting 2, 3, 4).
    expect(known.lookup(t(1, 2, 3, 4, 9, 9), 2).map((p) => p.logprob)).toEqual([-100, -101, -102]);
    // The whole prompt again: every position.
    expect(known.lookup(t(1, 2, 3, 4, 5, 6), 2)).toHaveLength(5);
    // Nothing shared, or only the first token (which predicts nothing): none.
    expect(known.lookup(t(7, 8), 2)).toEqual([]);
    expect(known.lookup(t(1, 8), 2)).toEqual([]);
  });

  it('takes a prompt only where it kept at least the alternatives asked for', () => {
    const known = new ScoredPrefixes();
    known.remember(t(1, 2, 3), positions(1, 2, 2), 2);
    expect(known.lookup(t(1, 2, 3), 5)).toEqual([]);
    known.remember(t(1, 2, 3, 4), positions(2, 3, 5), 5);
    expect(known.lookup(t(1, 2, 3), 5).map((p) => p.logprob)).toEqual([-200, -201]);
  });

  it('prefers the prompt that shares most, and forgets the least recently used first', () => {
    const known = new ScoredPrefixes();
    known.remember(t(1, 2, 9), positions(1, 2), 2);
    known.remember(t(1, 2, 3, 4), positions(2, 3), 2);
    expect(known.lookup(t(1, 2, 3, 5), 2).map((p) => p.logprob)).toEqual([-200, -201]);
    for (let i = 0; i < 16; i++) known.remember(t(50 + i, 1), positions(3, 1), 2);
    expect(known.lookup(t(1, 2, 3, 4), 2)).toEqual([]);
  });
});

describe('pickSlotForTokens', () => {
  const slot = (index: number, held: number[], lastUsed = 0) => ({
    index,
    held: [],
    lastUsed,
    sequence: { compareContextTokens: (prompt: Token[]) => ({ firstDifferentIndex: held.findIndex((id, i) => prompt[i] !== id) === -1 ? Math.min(held.length, prompt.length) : held.findIndex((id, i) => prompt[i] !== id) }) } as unknown as LlamaContextSequence,
  });

  it('takes the free sequence holding most of the prompt, else the least recently used', () => {
    const free = [slot(0, [], 5), slot(1, [1, 2, 9], 9), slot(2, [1, 2, 3, 4], 8)];
    expect(pickSlotForTokens(free, t(1, 2, 3, 7)).index).toBe(2);
    expect(pickSlotForTokens(free, t(1, 2, 9, 9)).index).toBe(1);
    expect(pickSlotForTokens([slot(0, [5], 5), slot(1, [6], 1)], t(1, 2)).index).toBe(1);
  });
});
