import { describe, expect, it } from 'vitest';
import { DEFAULT_SCHEDULER, eulerStep, parseSchedulerConfig, partialSchedule, scaleInput, schedule } from '../../src/core/tasks/image/scheduler.js';
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

  it('runs the last ⌊N·strength⌋ steps for img2img, growing N until one step runs', () => {
    expect(partialSchedule(config, 1, 0.5)).toMatchObject({ scheduled: 2, timesteps: [499] });
    expect(partialSchedule(config, 4, 0.5)).toMatchObject({ scheduled: 4, timesteps: [499, 249] });
    expect(partialSchedule(config, 2, 1).timesteps).toEqual([999, 499]);
    expect(partialSchedule(config, 1, 0.2)).toMatchObject({ scheduled: 5, timesteps: [199] });
    expect(partialSchedule(config, 4, 0)).toMatchObject({ timesteps: [], sigmas: [0] });
  });

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
