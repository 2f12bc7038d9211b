import { InvalidRequestError } from '../../core/errors.js';
import { MAX_STEPS } from '../../core/tasks/image/options.js';

/**
 * The Euler sampler over a diffusers discrete noise schedule
 * (EulerDiscreteScheduler's arithmetic): σ(t) = √((1 − ᾱₜ)/ᾱₜ) from the
 * training betas, timesteps picked by the config's spacing (SD-Turbo:
 * "trailing", so one step is t = 999, σ = 14.6146), the UNet fed x/√(σ²+1)
 * and t, and each step moving x along the predicted noise to the next σ (0
 * after the last step). img2img starts part-way down: see partialSchedule.
 */

export interface SchedulerConfig {
  num_train_timesteps: number;
  beta_start: number;
  beta_end: number;
  beta_schedule: 'scaled_linear' | 'linear';
  timestep_spacing: 'trailing' | 'leading' | 'linspace';
  steps_offset: number;
  prediction_type: 'epsilon' | 'v_prediction';
}

export const DEFAULT_SCHEDULER: SchedulerConfig = {
  num_train_timesteps: 1000,
  beta_start: 0.00085,
  beta_end: 0.012,
  beta_schedule: 'scaled_linear',
  timestep_spacing: 'trailing',
  steps_offset: 1,
  prediction_type: 'epsilon',
};

/** Reads a diffusers scheduler_config.json, keeping the fields the Euler sampler uses (defaults: SD-Turbo's). */
export function parseSchedulerConfig(raw: unknown): SchedulerConfig {
  const o = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
  const num = (key: keyof SchedulerConfig) => (typeof o[key] === 'number' ? (o[key] as number) : (DEFAULT_SCHEDULER[key] as number));
  const pick = <T extends string>(key: keyof SchedulerConfig, allowed: readonly T[]): T => {
    const value = o[key];
    if (value === undefined || value === null) return DEFAULT_SCHEDULER[key] as T;
    if (typeof value !== 'string' || !allowed.includes(value as T)) throw new Error(`scheduler_config.json: unsupported ${key} '${String(value)}' (supported: ${allowed.join(', ')})`);
    return value as T;
  };
  if (Array.isArray(o.trained_betas)) throw new Error('scheduler_config.json: trained_betas are not supported');
  return {
    num_train_timesteps: num('num_train_timesteps'),
    beta_start: num('beta_start'),
    beta_end: num('beta_end'),
    beta_schedule: pick('beta_schedule', ['scaled_linear', 'linear'] as const),
    timestep_spacing: pick('timestep_spacing', ['trailing', 'leading', 'linspace'] as const),
    steps_offset: num('steps_offset'),
    prediction_type: pick('prediction_type', ['epsilon', 'v_prediction'] as const),
  };
}

export interface Schedule {
  /** UNet timesteps, high noise first. */
  timesteps: number[];
  /** σ at each timestep, then 0: one longer than `timesteps`. */
  sigmas: number[];
}

/** σ for every training timestep 0 … N−1. */
function trainingSigmas(config: SchedulerConfig): Float64Array {
  const n = config.num_train_timesteps;
  const sigmas = new Float64Array(n);
  let cumulative = 1;
  for (let i = 0; i < n; i++) {
    const beta =
      config.beta_schedule === 'scaled_linear'
        ? (Math.sqrt(config.beta_start) + ((Math.sqrt(config.beta_end) - Math.sqrt(config.beta_start)) * i) / (n - 1)) ** 2
        : config.beta_start + ((config.beta_end - config.beta_start) * i) / (n - 1);
    cumulative *= 1 - beta;
    sigmas[i] = Math.sqrt((1 - cumulative) / cumulative);
  }
  return sigmas;
}

/** numpy's round (half to even), which diffusers' timestep arithmetic uses: 812.5 → 812, not 813. */
function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * Most steps one schedule may have: MAX_STEPS, and never more than the
 * training timesteps (beyond them timesteps would repeat). A request is
 * checked against the model's own `max_steps` before this; this is the
 * backstop that keeps any caller from scheduling millions of steps.
 */
export function maxScheduledSteps(config: SchedulerConfig): number {
  return Math.min(MAX_STEPS, config.num_train_timesteps);
}

function checkScheduledSteps(config: SchedulerConfig, steps: number): void {
  const max = maxScheduledSteps(config);
  if (!Number.isInteger(steps) || steps < 1 || steps > max) {
    throw new InvalidRequestError(`'steps' must be an integer from 1 to ${max}; got ${steps}.`, { param: 'steps', code: 'invalid_value' });
  }
}

/** The full schedule for `steps` denoising steps (diffusers' EulerDiscreteScheduler.set_timesteps). */
export function schedule(config: SchedulerConfig, steps: number): Schedule {
  checkScheduledSteps(config, steps);
  const n = config.num_train_timesteps;
  let timesteps: number[];
  if (config.timestep_spacing === 'trailing') {
    const ratio = n / steps;
    timesteps = Array.from({ length: steps }, (_, i) => roundHalfEven(n - i * ratio) - 1);
  } else if (config.timestep_spacing === 'leading') {
    const ratio = Math.floor(n / steps);
    timesteps = Array.from({ length: steps }, (_, i) => (steps - 1 - i) * ratio + config.steps_offset);
  } else {
    timesteps = Array.from({ length: steps }, (_, i) => Math.round(((n - 1) * (steps - 1 - i)) / Math.max(1, steps - 1)));
  }
  return withSigmas(config, timesteps);
}

function withSigmas(config: SchedulerConfig, timesteps: number[]): Schedule {
  const n = config.num_train_timesteps;
  const table = trainingSigmas(config);
  return { timesteps, sigmas: [...timesteps.map((t) => table[Math.min(n - 1, Math.max(0, t))]!), 0] };
}

/**
 * The schedule of an img2img run (`strength` s of `steps` N; T training
 * timesteps). The rule, diffusers' img2img semantics made exact for any s:
 *
 * - s = 0 runs no step: the input comes back (through the VAE round trip).
 * - s in (0, 1] runs k = round(N·s) steps, at least 1 (and at most ⌊s·T⌋,
 *   so no timestep repeats), never more than N ≤ maxScheduledSteps.
 * - Those k steps are the configured spacing laid over the training range
 *   below s·T instead of below T, so the first step starts at the timestep
 *   (and σ) the strength names, whatever k is: trailing tᵢ = round(s·T −
 *   i·s·T/k) − 1, leading tᵢ = (k−1−i)·⌊s·T/k⌋ + steps_offset, linspace k
 *   points from round(s·(T−1)) down to 0. At 1 step, strength 0.3 starts at
 *   t = 299, 0.5 at 499, 1 at 999 (σ 0.830, 1.613, 14.615 for SD-Turbo).
 *
 * Where N·s is a whole number this is exactly diffusers' img2img schedule
 * (its last N·s timesteps: steps 4, strength 0.5 → 499, 249 with trailing
 * spacing) for trailing and leading spacing. Elsewhere diffusers takes the
 * last ⌊N·s⌋ timesteps, which is none at 1 step below strength 1, and the
 * start then depends on the rounded count only; here it is always s·T. The
 * earlier rule grew N to ⌈1/s⌉ so that one step ran, which scheduled a
 * billion steps for s = 1e-9; this one never schedules more than N.
 */
export function partialSchedule(config: SchedulerConfig, steps: number, strength: number): Schedule {
  checkScheduledSteps(config, steps);
  if (!(strength >= 0 && strength <= 1)) throw new InvalidRequestError(`'strength' must be from 0 to 1; got ${strength}.`, { param: 'strength', code: 'invalid_value' });
  if (strength === 0) return { timesteps: [], sigmas: [0] };
  if (strength === 1) return schedule(config, steps);
  const n = config.num_train_timesteps;
  const range = strength * n;
  const run = Math.max(1, Math.min(steps, Math.round(steps * strength), Math.floor(range)));
  let timesteps: number[];
  if (config.timestep_spacing === 'trailing') {
    const ratio = range / run;
    timesteps = Array.from({ length: run }, (_, i) => roundHalfEven(range - i * ratio) - 1);
  } else if (config.timestep_spacing === 'leading') {
    const ratio = Math.floor(range / run);
    timesteps = Array.from({ length: run }, (_, i) => (run - 1 - i) * ratio + config.steps_offset);
  } else {
    const top = strength * (n - 1);
    timesteps = Array.from({ length: run }, (_, i) => Math.round(run === 1 ? top : (top * (run - 1 - i)) / (run - 1)));
  }
  return withSigmas(config, timesteps.map((t) => Math.min(n - 1, Math.max(0, t))));
}

/** The UNet's input at σ: x / √(σ² + 1). */
export function scaleInput(x: Float32Array, sigma: number, out = new Float32Array(x.length)): Float32Array {
  const k = 1 / Math.sqrt(sigma * sigma + 1);
  for (let i = 0; i < x.length; i++) out[i] = x[i]! * k;
  return out;
}

/**
 * One Euler step in place: x ← x + d·(σ_next − σ), d = (x − x̂₀)/σ with x̂₀
 * from the model output (ε, or v for v-prediction models).
 */
export function eulerStep(x: Float32Array, output: Float32Array, sigma: number, sigmaNext: number, prediction: SchedulerConfig['prediction_type']): void {
  const dt = sigmaNext - sigma;
  if (prediction === 'epsilon') {
    for (let i = 0; i < x.length; i++) x[i] = x[i]! + output[i]! * dt;
    return;
  }
  // v-prediction: x̂₀ = x/(σ²+1) − v·σ/√(σ²+1).
  const c = 1 / (sigma * sigma + 1);
  const s = sigma / Math.sqrt(sigma * sigma + 1);
  for (let i = 0; i < x.length; i++) {
    const x0 = x[i]! * c - output[i]! * s;
    x[i] = x[i]! + ((x[i]! - x0) / sigma) * dt;
  }
}
