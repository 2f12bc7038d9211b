import { describe, expect, it } from 'vitest';
import { MAX_STEPS } from '../../src/core/tasks/image/options.js';
import { DEFAULT_SCHEDULER, eulerStep, maxScheduledSteps, parseSchedulerConfig, partialSchedule, scaleInput, schedule } from '../../src/families/stable-diffusion/scheduler.js';
import { SD_TURBO_SCHEDULER } from '../fixtures/onnx/sd-turbo/index.js';

/** The Euler sampler's numbers against diffusers' EulerDiscreteScheduler for SD-Turbo's config. */

const config = parseSchedulerConfig(SD_TURBO_SCHEDULER);

describe('schedule', () => {
  it("reads SD-Turbo's scheduler_config.json: trailing spacing, epsilon prediction", () => {
    expect(config).toEqual({ ...DEFAULT_SCHEDULER, timestep_spacing: 'trailing', prediction_type: 'epsilon' });
  });

  it('picks trailing timesteps and their sigmas (σ(999) = 14.6146)', () => {
    expect(schedule(config, 1).timesteps).toEqual([999]);
    expect(schedule(config, 2).timesteps).toEqual([999, 499]);
    expect(schedule(config, 4).timesteps).toEqual([999, 749, 499, 249]);
    const { sigmas } = schedule(config, 4);
    expect(sigmas).toHaveLength(5);
    [14.6146, 4.0817, 1.6129, 0.6932, 0].forEach((sigma, i) => expect(sigmas[i]).toBeCloseTo(sigma, 3));
  });

  it('spaces leading and linspace schedules as diffusers does', () => {
    expect(schedule({ ...config, timestep_spacing: 'leading' }, 4).timesteps).toEqual([751, 501, 251, 1]);
    expect(schedule({ ...config, timestep_spacing: 'linspace' }, 3).timesteps).toEqual([999, 500, 0]);
  });

  it('rounds trailing timesteps half to even as numpy does (16 steps: 811, not 812)', () => {
    // diffusers: np.arange(1000, 0, -62.5).round() - 1
    expect(schedule(config, 16).timesteps).toEqual([999, 937, 874, 811, 749, 687, 624, 561, 499, 437, 374, 311, 249, 187, 124, 61]);
  });

  it('caps the steps of any schedule at MAX_STEPS and the training timesteps', () => {
    expect(maxScheduledSteps(config)).toBe(MAX_STEPS);
    expect(maxScheduledSteps({ ...config, num_train_timesteps: 500 })).toBe(500);
    expect(schedule(config, MAX_STEPS).timesteps).toHaveLength(MAX_STEPS);
    for (const steps of [0, 1.5, MAX_STEPS + 1, 1e9]) {
      expect(() => schedule(config, steps)).toThrow(expect.objectContaining({ status: 400, param: 'steps', message: expect.stringContaining(`from 1 to ${MAX_STEPS}`) }));
      expect(() => partialSchedule(config, steps, 0.5)).toThrow(expect.objectContaining({ status: 400, param: 'steps' }));
    }
  });
});

/**
 * img2img: round(N·s) steps (at least one) over the training range below
 * s·T. Expected values are diffusers' (StableDiffusionImg2ImgPipeline's
 * get_timesteps over EulerDiscreteScheduler.set_timesteps, σ from the
 * scaled-linear betas), computed with numpy for SD-Turbo's config.
 */
describe('partialSchedule (img2img strength)', () => {
  const sigmasOf = (steps: number, strength: number, spacing = config) => partialSchedule(spacing, steps, strength).sigmas;

  it.each([
    // steps, strength, diffusers' timesteps, their σ
    [4, 0.5, [499, 249], [1.6129, 0.6932]],
    [4, 0.75, [749, 499, 249], [4.0817, 1.6129, 0.6932]],
    [4, 0.25, [249], [0.6932]],
    [4, 1, [999, 749, 499, 249], [14.6146, 4.0817, 1.6129, 0.6932]],
    [10, 0.7, [699, 599, 499, 399, 299, 199, 99], [3.3211, 2.2765, 1.6129, 1.1606, 0.8299, 0.5693, 0.3417]],
    [3, 2 / 3, [666, 332], [2.9183, 0.9292]],
    [16, 0.5, [499, 437, 374, 311, 249, 187, 124, 61], [1.6129, 1.3144, 1.069, 0.865, 0.6932, 0.541, 0.3977, 0.2531]],
  ])('trailing, %i steps at strength %d: the last N·s of the N timesteps, as diffusers', (steps, strength, timesteps, sigmas) => {
    const partial = partialSchedule(config, steps, strength);
    expect(partial.timesteps).toEqual(timesteps);
    expect(partial.sigmas).toHaveLength(timesteps.length + 1);
    sigmas.forEach((sigma, i) => expect(partial.sigmas[i]).toBeCloseTo(sigma, 3));
    expect(partial.sigmas.at(-1)).toBe(0);
  });

  it('leading spacing, where N·s is whole, matches diffusers too', () => {
    const leading = { ...config, timestep_spacing: 'leading' as const };
    expect(partialSchedule(leading, 4, 0.5).timesteps).toEqual([251, 1]);
    expect(partialSchedule(leading, 3, 2 / 3).timesteps).toEqual([334, 1]);
    expect(partialSchedule(leading, 4, 1).timesteps).toEqual(schedule(leading, 4).timesteps);
    [0.6984, 0.0413].forEach((sigma, i) => expect(sigmasOf(4, 0.5, leading)[i]).toBeCloseTo(sigma, 3));
  });

  it('at 1 step, starts at the timestep and σ the strength names (diffusers runs no step at all there)', () => {
    const cases: Array<[number, number, number]> = [
      [0.3, 299, 0.8299],
      [0.5, 499, 1.6129],
      [0.75, 749, 4.0817],
      [0.9, 899, 8.3028],
      [1, 999, 14.6146],
    ];
    for (const [strength, t, sigma] of cases) {
      const partial = partialSchedule(config, 1, strength);
      expect(partial.timesteps, `strength ${strength}`).toEqual([t]);
      expect(partial.sigmas[0]).toBeCloseTo(sigma, 3);
      expect(partial.sigmas[1]).toBe(0);
    }
    // Strengths in [0.5, 1) no longer all give the same picture.
    expect(new Set([0.5, 0.6, 0.7, 0.8, 0.9, 0.99].map((s) => partialSchedule(config, 1, s).timesteps[0])).size).toBe(6);
  });

  it('runs round(steps·strength) steps, at least one, from s·T down with the configured spacing', () => {
    expect(partialSchedule(config, 4, 0.3).timesteps).toEqual([299]); // round(1.2) = 1
    expect(partialSchedule(config, 4, 0.4).timesteps).toEqual([399, 199]); // round(1.6) = 2
    expect(partialSchedule(config, 2, 0.75).timesteps).toEqual([749, 374]); // round(1.5) = 2
    expect(partialSchedule(config, 50, 0.01).timesteps).toEqual([9]); // round(0.5) = 1
  });

  it('schedules at most `steps` for any strength: 1e-9 is one step at t = 0, not a billion', () => {
    const tiny = partialSchedule(config, 4, 1e-9);
    expect(tiny.timesteps).toEqual([0]);
    expect(tiny.sigmas[0]).toBeCloseTo(0.0292, 3);
    expect(partialSchedule(config, MAX_STEPS, 1e-9).timesteps).toEqual([0]);
    expect(partialSchedule(config, 4, Number.MIN_VALUE).timesteps).toEqual([0]);
    for (const steps of [1, 2, 4, 7, 50, 1000]) {
      for (let k = 1; k <= 200; k++) {
        const strength = k / 200;
        const { timesteps, sigmas } = partialSchedule(config, steps, strength);
        expect(timesteps.length).toBeGreaterThanOrEqual(1);
        expect(timesteps.length).toBeLessThanOrEqual(steps);
        expect(timesteps.length).toBe(Math.max(1, Math.min(Math.round(steps * strength), Math.floor(strength * 1000))));
        // Starts where the strength says and strictly descends (no repeated timestep).
        expect(Math.abs(timesteps[0]! - (strength * 1000 - 1))).toBeLessThanOrEqual(1);
        timesteps.slice(1).forEach((t, i) => expect(t).toBeLessThan(timesteps[i]!));
        expect(sigmas).toHaveLength(timesteps.length + 1);
      }
    }
  });

  it('strength 0 runs nothing (the input comes back); outside 0–1 is a 400', () => {
    expect(partialSchedule(config, 4, 0)).toEqual({ timesteps: [], sigmas: [0] });
    for (const strength of [-0.1, 1.5, Number.NaN]) {
      expect(() => partialSchedule(config, 4, strength)).toThrow(expect.objectContaining({ status: 400, param: 'strength' }));
    }
  });
});

describe('scheduler config', () => {
  it('refuses configs it cannot follow', () => {
    expect(() => parseSchedulerConfig({ ...SD_TURBO_SCHEDULER, prediction_type: 'sample' })).toThrow(/prediction_type 'sample'/);
    expect(() => parseSchedulerConfig({ ...SD_TURBO_SCHEDULER, trained_betas: [0.1] })).toThrow(/trained_betas/);
  });
});

describe('Euler step', () => {
  const x0 = Float32Array.from([0.5, -1.25, 2, 0]);
  const noise = Float32Array.from([1, -0.5, 0.25, 2]);
  const sigma = 14.6146;

  it('reaches x₀ in one step to σ = 0 when the model predicts the noise exactly (ε-prediction)', () => {
    const x = x0.map((v, i) => v + sigma * noise[i]!);
    eulerStep(x, noise, sigma, 0, 'epsilon');
    x.forEach((v, i) => expect(v).toBeCloseTo(x0[i]!, 4));
  });

  it('does the same for a v-prediction model given the exact v', () => {
    const x = x0.map((v, i) => v + sigma * noise[i]!);
    const root = Math.sqrt(sigma * sigma + 1);
    const v = x.map((xi, i) => (xi / (sigma * sigma + 1) - x0[i]!) * (root / sigma));
    eulerStep(x, v, sigma, 0, 'v_prediction');
    x.forEach((value, i) => expect(value).toBeCloseTo(x0[i]!, 3));
  });

  it('scales the model input by 1/√(σ²+1)', () => {
    expect([...scaleInput(Float32Array.from([3, -4]), Math.sqrt(3))]).toEqual([1.5, -2]);
  });
});
