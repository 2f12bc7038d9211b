import type { Token } from 'node-llama-cpp';
import type { PositionLogprobs } from '../../runtimes/llama/native-logprobs.js';

/** Positions kept over all remembered prompts: each holds up to 20 alternatives, about 1 KB, so at most ≈ 16 MB. */
const MAX_POSITIONS = 16_384;
const MAX_PROMPTS = 16;

interface Entry {
  tokens: readonly Token[];
  /** Position i: token i + 1's log-probability and the likeliest tokens after tokens 0…i. */
  positions: PositionLogprobs[];
  /** How many alternatives each position holds. */
  width: number;
}

/**
 * The prompts a chat model scored last, position by position. A position's
 * numbers depend only on the tokens up to it, so a prompt that shares a
 * prefix with a remembered one takes that prefix's positions as they are:
 * an evaluation harness sends each multiple-choice item as one context with
 * several continuations (in one request or in several), and the context is
 * evaluated once. Least recently used prompts are forgotten first.
 */
export class ScoredPrefixes {
  private entries: Entry[] = [];

  /** The positions `prompt` shares with the remembered prompt that shares most of it, with at least `top` alternatives each. */
  lookup(prompt: readonly Token[], top: number): PositionLogprobs[] {
    let best: Entry | undefined;
    let bestShared = 0;
    for (const entry of this.entries) {
      if (entry.width < top) continue;
      const shared = sharedPrefix(entry.tokens, prompt);
      if (shared > bestShared) [best, bestShared] = [entry, shared];
    }
    if (!best) return [];
    this.entries = [best, ...this.entries.filter((e) => e !== best)];
    // Positions 0…shared-2 predict tokens both prompts share.
    return best.positions.slice(0, Math.max(0, bestShared - 1));
  }

  remember(tokens: readonly Token[], positions: PositionLogprobs[], width: number): void {
    this.entries = [{ tokens: [...tokens], positions, width }, ...this.entries.filter((e) => e.tokens.length !== tokens.length || sharedPrefix(e.tokens, tokens) !== tokens.length)];
    let total = 0;
    this.entries = this.entries.filter((e, i) => i < MAX_PROMPTS && (total += e.positions.length) <= MAX_POSITIONS);
  }
}

/** How many leading tokens `a` and `b` share. */
function sharedPrefix(a: readonly Token[], b: readonly Token[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
