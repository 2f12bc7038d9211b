import { describe, expect, it } from 'vitest';
import { MAX_STEPS } from '../../src/core/tasks/image/options.js';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  ancestralStep,
  DEFAULT_SCHEDULER,
  eulerStep,
  initNoiseSigma,
  maxScheduledSteps,
  parseSchedulerConfig,
  partialSchedule,
  scaleInput,
  schedule,
  SchedulerConfigError,
} from '../../src/families/stable-diffusion/scheduler.js';
import { SD_TURBO_SCHEDULER } from '../fixtures/onnx/sd-turbo/index.js';

/**
 * The Euler sampler's numbers for SD-Turbo's config and others. The values
 * written here are diffusers' EulerDiscreteScheduler's (checked by running
 * diffusers 0.40.0.dev0); the golden tables below come from a NumPy
 * re-implementation of its formulas.
 */

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
    // np.linspace(0, 999, 3) reversed: fractional, as diffusers feeds them (an integer UNet input rounds 499.5).
    expect(schedule({ ...config, timestep_spacing: 'linspace' }, 3).timesteps).toEqual([999, 499.5, 0]);
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
 * scaled-linear betas) for SD-Turbo's config, as diffusers 0.40.0.dev0 gives them.
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

  it.each([
    ['_class_name', 'PNDMScheduler'],
    ['_class_name', 'DPMSolverMultistepScheduler'],
    ['beta_schedule', 'squaredcos_cap_v2'],
    ['timestep_spacing', 'even'],
    ['prediction_type', 'sample'],
    ['rescale_betas_zero_snr', true],
    ['use_exponential_sigmas', true],
    ['use_beta_sigmas', true],
    ['interpolation_type', 'log_linear'],
    ['final_sigmas_type', 'max'],
    ['use_karras_sigmas', 'yes'],
    ['steps_offset', -1],
    ['num_train_timesteps', 0],
    ['beta_start', 'small'],
  ])('names the key of an unsupported %s (%j)', (key, value) => {
    let error: unknown;
    try {
      parseSchedulerConfig({ ...SD_TURBO_SCHEDULER, [key]: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SchedulerConfigError);
    expect((error as SchedulerConfigError).key).toBe(key);
    expect((error as Error).message).toContain(`unsupported ${key} `);
  });

  it('refuses continuous timesteps only with v-prediction, where they change the UNet input', () => {
    expect(parseSchedulerConfig({ ...SD_TURBO_SCHEDULER, timestep_type: 'continuous' }).prediction_type).toBe('epsilon');
    expect(() => parseSchedulerConfig({ ...SD_TURBO_SCHEDULER, timestep_type: 'continuous', prediction_type: 'v_prediction' })).toThrow(/timestep_type 'continuous'/);
  });

  it("reads Euler ancestral, Karras sigmas and sigma bounds, and fills missing keys with diffusers' defaults", () => {
    expect(parseSchedulerConfig({ _class_name: 'EulerAncestralDiscreteScheduler', timestep_spacing: 'leading', steps_offset: 1 })).toEqual({
      sampler: 'euler_ancestral',
      num_train_timesteps: 1000,
      beta_start: 0.0001,
      beta_end: 0.02,
      beta_schedule: 'linear',
      timestep_spacing: 'leading',
      steps_offset: 1,
      prediction_type: 'epsilon',
      use_karras_sigmas: false,
      final_sigmas_type: 'zero',
    });
    const karras = parseSchedulerConfig({ ...SD_TURBO_SCHEDULER, use_karras_sigmas: true, sigma_min: 0.03, sigma_max: null, final_sigmas_type: 'sigma_min' });
    expect(karras).toMatchObject({ sampler: 'euler', use_karras_sigmas: true, sigma_min: 0.03, final_sigmas_type: 'sigma_min' });
    expect(karras.sigma_max).toBeUndefined();
    // No scheduler_config.json at all: SD-Turbo's.
    expect(parseSchedulerConfig(undefined)).toEqual(DEFAULT_SCHEDULER);
    // Ancestral has no Karras sigmas: diffusers ignores the key for that class, and so does lserve.
    expect(parseSchedulerConfig({ _class_name: 'EulerAncestralDiscreteScheduler', use_karras_sigmas: true, interpolation_type: 'log_linear' }).use_karras_sigmas).toBe(false);
  });
});

/**
 * Tables for several configs from an independent NumPy re-implementation of
 * the formulas of diffusers' EulerDiscreteScheduler and
 * EulerAncestralDiscreteScheduler (test/golden/schedulers-numpy.json, written
 * by scripts/golden/schedulers.py, whose header says where each formula
 * comes from; not generated by diffusers, which scripts/golden/
 * check_schedulers_diffusers.py compares them with), timesteps and σ within
 * 1e-4 relative.
 */
describe('golden schedules (NumPy re-implementation of diffusers\' Euler schedulers)', () => {
  interface GoldenCase {
    name: string;
    config: Record<string, unknown>;
    steps: number;
    strength?: number;
    timesteps: number[];
    sigmas: number[];
    init_noise_sigma?: number;
  }
  const golden = JSON.parse(readFileSync(fileURLToPath(new URL('../golden/schedulers-numpy.json', import.meta.url)), 'utf8')) as { cases: GoldenCase[] };
  const close = (actual: readonly number[], expected: readonly number[], what: string) => {
    expect(actual, what).toHaveLength(expected.length);
    expected.forEach((e, i) => {
      const a = actual[i]!;
      if (Math.abs(a - e) > 1e-4 * Math.abs(e)) expect.fail(`${what}[${i}]: ${a}, expected ${e} (relative ${Math.abs(a - e) / Math.abs(e)})`);
    });
  };

  it('covers Euler and Euler ancestral, ε and v, every spacing, Karras sigmas, final sigma_min, img2img', () => {
    expect(golden.cases.length).toBeGreaterThanOrEqual(30);
    const configs = golden.cases.map((c) => parseSchedulerConfig(c.config));
    expect(new Set(configs.map((c) => c.sampler))).toEqual(new Set(['euler', 'euler_ancestral']));
    expect(new Set(configs.map((c) => c.timestep_spacing))).toEqual(new Set(['trailing', 'leading', 'linspace']));
    expect(new Set(configs.map((c) => c.prediction_type))).toEqual(new Set(['epsilon', 'v_prediction']));
    expect(new Set(configs.map((c) => c.beta_schedule))).toEqual(new Set(['scaled_linear', 'linear']));
    expect(configs.some((c) => c.use_karras_sigmas)).toBe(true);
    expect(configs.some((c) => c.final_sigmas_type === 'sigma_min')).toBe(true);
    expect(golden.cases.some((c) => c.strength !== undefined)).toBe(true);
  });

  it.each(golden.cases.map((c) => [c.name, c] as const))('%s', (_, c) => {
    const parsed = parseSchedulerConfig(c.config);
    const sched = c.strength === undefined ? schedule(parsed, c.steps) : partialSchedule(parsed, c.steps, c.strength);
    close(sched.timesteps, c.timesteps, 'timesteps');
    // img2img's σ list is the tail of the full one: its final σ comes from the full schedule too.
    close(sched.sigmas, c.sigmas, 'sigmas');
    if (c.init_noise_sigma !== undefined) close([initNoiseSigma(parsed, sched)], [c.init_noise_sigma], 'init_noise_sigma');
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

  it('ancestral: σ_up of fresh noise on top of an Euler step to σ_down, and a plain Euler step to σ = 0', () => {
    const sigmaNext = 4.0817;
    const up = Math.sqrt((sigmaNext ** 2 * (sigma ** 2 - sigmaNext ** 2)) / sigma ** 2);
    const down = Math.sqrt(sigmaNext ** 2 - up ** 2);
    const fresh = Float32Array.from([0.3, -1, 0.5, 2]);
    const x = x0.map((v, i) => v + sigma * noise[i]!);
    const expected = x.map((v, i) => v + noise[i]! * (down - sigma) + fresh[i]! * up);
    ancestralStep(x, noise, sigma, sigmaNext, 'epsilon', fresh);
    x.forEach((v, i) => expect(v).toBeCloseTo(expected[i]!, 4));
    const last = x0.map((v, i) => v + sigma * noise[i]!);
    ancestralStep(last, noise, sigma, 0, 'epsilon', fresh);
    last.forEach((v, i) => expect(v).toBeCloseTo(x0[i]!, 4));
  });

  it('scales the model input by 1/√(σ²+1)', () => {
    expect([...scaleInput(Float32Array.from([3, -4]), Math.sqrt(3))]).toEqual([1.5, -2]);
  });
});
