/**
 * Greedy CTC decoding of a recogniser's per-timestep class probabilities:
 * take the best class at each step, collapse repeats, drop blanks (class 0).
 * The confidence is the mean probability of the kept steps, as PaddleOCR
 * reports it. `charset[0]` is the blank; the model's space class maps to ' '.
 */

export interface Decoded {
  text: string;
  score: number;
}

/**
 * Decodes one sequence of `steps` timesteps x `classes` classes starting at
 * `offset` in `probs`. `steps` may be fewer than the tensor's time axis: the
 * padded tail of a batched line carries no text.
 */
export function ctcGreedyDecode(probs: Float32Array, offset: number, steps: number, classes: number, charset: readonly string[]): Decoded {
  let text = '';
  let sum = 0;
  let kept = 0;
  let previous = -1;
  for (let t = 0; t < steps; t++) {
    const base = offset + t * classes;
    let best = 0;
    let bestP = probs[base]!;
    for (let c = 1; c < classes; c++) {
      const p = probs[base + c]!;
      if (p > bestP) {
        bestP = p;
        best = c;
      }
    }
    if (best !== 0 && best !== previous) {
      text += charset[best] ?? '';
      sum += bestP;
      kept++;
    }
    previous = best;
  }
  return { text, score: kept > 0 ? sum / kept : 0 };
}
