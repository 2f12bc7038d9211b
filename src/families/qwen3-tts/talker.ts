/**
 * How the talker graph's KV cache is wired: which inputs are past keys and
 * values and which outputs are their present counterparts. Exporters name
 * them differently (`past_key_values.0.key` / `present.0.key`, `past_kv_0_1`,
 * …), so names are read from the session: by a common suffix when the names
 * agree, otherwise in graph order (inputs and outputs of an exported decoder
 * list the layers in the same order).
 */

export const TALKER_INPUTS = ['inputs_embeds', 'position_ids', 'attention_mask'] as const;
export const TALKER_OUTPUTS = ['logits', 'hidden_states'] as const;

export interface CachePair {
  past: string;
  present: string;
}

const PAST_PREFIX = /^(past_key_values|past_kv|past)[._]?/;
const PRESENT_PREFIX = /^(present_key_values|present_kv|present)[._]?/;

export function pairCache(inputNames: readonly string[], outputNames: readonly string[]): CachePair[] {
  const pasts = inputNames.filter((n) => !(TALKER_INPUTS as readonly string[]).includes(n));
  const presents = outputNames.filter((n) => !(TALKER_OUTPUTS as readonly string[]).includes(n));
  for (const required of TALKER_INPUTS) if (!inputNames.includes(required)) throw new Error(`the talker graph has no input '${required}'`);
  for (const required of TALKER_OUTPUTS) if (!outputNames.includes(required)) throw new Error(`the talker graph has no output '${required}'`);
  if (pasts.length === 0 || pasts.length !== presents.length) {
    throw new Error(`the talker graph has ${pasts.length} cache inputs and ${presents.length} cache outputs`);
  }
  const suffix = (name: string, prefix: RegExp) => name.replace(prefix, '');
  const bySuffix = new Map(presents.map((n) => [suffix(n, PRESENT_PREFIX), n]));
  if (bySuffix.size === presents.length && pasts.every((n) => bySuffix.has(suffix(n, PAST_PREFIX)))) {
    return pasts.map((past) => ({ past, present: bySuffix.get(suffix(past, PAST_PREFIX))! }));
  }
  return pasts.map((past, i) => ({ past, present: presents[i]! }));
}
