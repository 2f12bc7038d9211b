import { InvalidRequestError } from '../../errors.js';

/**
 * The Euler sampler over a diffusers discrete noise schedule
 * (EulerDiscreteScheduler's arithmetic): σ(t) = √((1 − ᾱₜ)/ᾱₜ) from the
 * training betas, timesteps picked by the config's spacing (SD-Turbo:
 * "trailing", so one step is t = 999, σ = 14.6146), the UNet fed x/√(σ²+1)
 * and t, and each step moving x along the predicted noise to the next σ (0
 * after the last step). img2img starts part-way down the same schedule.
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

/** The full schedule for `steps` denoising steps. */
export function schedule(config: SchedulerConfig, steps: number): Schedule {
  const n = config.num_train_timesteps;
  let timesteps: number[];
  if (config.timestep_spacing === 'trailing') {
    const ratio = n / steps;
    timesteps = Array.from({ length: steps }, (_, i) => Math.round(n - i * ratio) - 1);
  } else if (config.timestep_spacing === 'leading') {
    const ratio = Math.floor(n / steps);
    timesteps = Array.from({ length: steps }, (_, i) => (steps - 1 - i) * ratio + config.steps_offset);
  } else {
    timesteps = Array.from({ length: steps }, (_, i) => Math.round(((n - 1) * (steps - 1 - i)) / Math.max(1, steps - 1)));
  }
  const table = trainingSigmas(config);
  return { timesteps, sigmas: [...timesteps.map((t) => table[Math.min(n - 1, Math.max(0, t))]!), 0] };
}

/**
 * The steps an img2img or strength-limited run takes: diffusers' rule, which
 * runs the last ⌊N·strength⌋ of N steps. SD-Turbo needs N·strength ≥ 1, so N
 * grows until at least one step runs (strength 0.5 at 1 step → 2 scheduled, 1 run).
 */
export function partialSchedule(config: SchedulerConfig, steps: number, strength: number): Schedule & { scheduled: number } {
  if (strength <= 0) return { timesteps: [], sigmas: [0], scheduled: steps };
  const scheduled = Math.max(steps, Math.ceil(1 / strength - 1e-9));
  const full = schedule(config, scheduled);
  const run = Math.min(scheduled, Math.max(1, Math.floor(scheduled * strength + 1e-9)));
  const start = scheduled - run;
  return { timesteps: full.timesteps.slice(start), sigmas: full.sigmas.slice(start), scheduled };
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

/** Steps a model allows; a value outside is a 400 that says the range. */
export function checkSteps(steps: number, max: number, model: string): void {
  if (!Number.isInteger(steps) || steps < 1 || steps > max) {
    throw new InvalidRequestError(`'steps' must be an integer from 1 to ${max} for model '${model}'; got ${steps}.`, { param: 'steps', code: 'invalid_value' });
  }
}
