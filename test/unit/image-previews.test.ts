import { describe, expect, it } from 'vitest';
import { previewSteps } from '../../src/families/stable-diffusion/sample.js';
import { eulerStep, predictedOriginal } from '../../src/families/stable-diffusion/scheduler.js';

/**
 * Partial images: at which steps they are shown, and the prediction of the
 * finished latents (x̂₀) they picture, the same one the Euler step moves towards.
 */

describe('previewSteps', () => {
  it('spreads up to `count` previews evenly over the steps before the last, none for one step', () => {
    expect(previewSteps(3, 1)).toEqual([]);
    expect(previewSteps(3, 2)).toEqual([1]);
    expect(previewSteps(3, 4)).toEqual([1, 2, 3]);
    expect(previewSteps(2, 4)).toEqual([1, 3]);
    expect(previewSteps(1, 4)).toEqual([2]);
    expect(previewSteps(3, 20)).toEqual([5, 10, 15]);
    expect(previewSteps(0, 20)).toEqual([]);
    for (let steps = 1; steps <= 60; steps++) {
      for (let count = 0; count <= 3; count++) {
        const at = previewSteps(count, steps);
        expect(at.length).toBe(Math.min(count, steps - 1));
        at.forEach((s, i) => {
          expect(s).toBeGreaterThanOrEqual(1);
          expect(s).toBeLessThan(steps);
          if (i > 0) expect(s).toBeGreaterThan(at[i - 1]!);
        });
      }
    }
  });
});

describe('predictedOriginal', () => {
  it('is the x̂₀ the Euler step heads for, for ε and v prediction', () => {
    const x = Float32Array.from({ length: 16 }, (_, i) => Math.sin(i) * 3);
    const out = Float32Array.from({ length: 16 }, (_, i) => Math.cos(i));
    for (const prediction of ['epsilon', 'v_prediction'] as const) {
      const [sigma, next] = [2.5, 1.1];
      const x0 = predictedOriginal(x, out, sigma, prediction);
      const stepped = x.slice();
      eulerStep(stepped, out, sigma, next, prediction);
      for (let i = 0; i < x.length; i++) expect(stepped[i]!).toBeCloseTo(x[i]! + ((x[i]! - x0[i]!) / sigma) * (next - sigma), 5);
      // A step to σ = 0 lands on it.
      const last = x.slice();
      eulerStep(last, out, sigma, 0, prediction);
      for (let i = 0; i < x.length; i++) expect(last[i]!).toBeCloseTo(x0[i]!, 5);
    }
  });
});
