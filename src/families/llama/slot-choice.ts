import type { LlamaContextSequence, Token } from 'node-llama-cpp';

/**
 * Which sequence a chat request takes: the one that already holds most of
 * its conversation, told apart message by message (fingerprint), and how
 * much of its prompt that sequence holds.
 */

/**
 * How much of the prompt the sequence's KV state already holds: LlamaChat
 * keeps the sequence's tokens up to the first one that differs from the
 * prompt (adaptStateToTokens without shifting) and evaluates the rest, and it
 * always evaluates the prompt's last token again for its logits.
 */
export function reusedTokens(sequence: LlamaContextSequence, prompt: Token[]): number {
  return Math.max(0, Math.min(sequence.compareContextTokens(prompt).firstDifferentIndex, prompt.length - 1));
}

/**
 * A message as the prompt cache tells messages apart: what the template
 * renders of it (not call ids, which each API spells its own way, nor
 * earlier reasoning, which clients often leave out and templates drop);
 * its images and audio by the hash of their decoded content.
 */
export function fingerprint(message: { role: string; content: string; toolCalls?: ReadonlyArray<{ name: string; arguments: string }> }, media?: readonly string[]): string {
  const calls = message.toolCalls?.length ? message.toolCalls.map((call) => [call.name, call.arguments]) : null;
  return JSON.stringify([message.role, message.content, calls, ...(media?.length ? [media] : [])]);
}

/**
 * The free slot whose held conversation shares the longest message prefix
 * with this one (its tokens need no evaluation). A conversation that shares
 * nothing takes an empty slot if there is one, else the least recently used:
 * the others may hold conversations still going on (a client taking turns
 * with others, an agent between tool calls), whose next turn would otherwise
 * evaluate its whole prompt again. Among equals the lowest sequence, which
 * keeps busy sequences consecutive: llama.cpp decodes consecutive sequence
 * ids in one micro-batch, and a gap splits the batch (decode-gate.ts).
 */
export function pickSlot<S extends { index: number; held: readonly string[]; lastUsed?: number }>(free: readonly S[], messages: readonly string[]): S {
  let best = free[0]!;
  let bestRank: number[] = [];
  for (const slot of free) {
    let shared = 0;
    while (shared < slot.held.length && shared < messages.length && slot.held[shared] === messages[shared]) shared++;
    // Compared in order, greater first: shared messages; for none, empty before held, then older use.
    const rank = shared > 0 ? [shared, 0, 0] : [0, slot.held.length === 0 ? 1 : 0, -(slot.lastUsed ?? 0)];
    if (bestRank.length === 0 || outranks(rank, bestRank) || (!outranks(bestRank, rank) && slot.index < best.index)) {
      best = slot;
      bestRank = rank;
    }
  }
  return best;
}

/**
 * The free sequence for a raw prompt (no messages to compare): the one that
 * holds most of its tokens — the previous prompt of an evaluation harness
 * shares its context — else as pickSlot chooses for no messages.
 */
export function pickSlotForTokens<S extends { index: number; held: readonly string[]; lastUsed?: number; sequence: LlamaContextSequence }>(free: readonly S[], prompt: Token[]): S {
  let best: S | undefined;
  let bestShared = 0;
  for (const slot of free) {
    const shared = reusedTokens(slot.sequence, prompt);
    if (shared > bestShared) [best, bestShared] = [slot, shared];
  }
  return best ?? pickSlot(free, []);
}

function outranks(a: readonly number[], b: readonly number[]): boolean {
  const at = a.findIndex((x, i) => x !== b[i]);
  return at >= 0 && a[at]! > b[at]!;
}
