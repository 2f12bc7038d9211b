import { InvalidRequestError } from '../../core/errors.js';
import { MAX_STEPS } from '../../core/tasks/image/options.js';

/**
 * The Euler samplers over a diffusers discrete noise schedule, as the
 * export's scheduler_config.json configures them: EulerDiscreteScheduler
 * and EulerAncestralDiscreteScheduler, ε- or v-prediction, linspace /
 * leading / trailing timestep spacing with steps_offset, scaled_linear or
 * linear betas, Karras sigmas (Euler only, with sigma_min / sigma_max) and
 * final_sigmas_type. σ(t) = √((1 − ᾱₜ)/ᾱₜ) from the training betas (in
 * float32, as diffusers computes them with torch), timesteps picked by the
 * spacing (SD-Turbo: "trailing", so one step is t = 999, σ = 14.6146), σ
 * interpolated at them; the UNet is fed x/√(σ²+1) and t, and each step moves
 * x to the next σ (0 after the last step). img2img starts part-way down: see
 * partialSchedule. test/golden/schedulers-numpy.json holds tables for several
 * configs from a NumPy re-implementation of diffusers' formulas
 * (scripts/golden/schedulers.py, checked against diffusers itself by
 * check_schedulers_diffusers.py), which the unit tests compare against. Anything else a config asks for is refused when the model
 * is pulled or registered (prepare.ts), naming the key.
 */

export type Sampler = 'euler' | 'euler_ancestral';

export interface SchedulerConfig {
  /** EulerDiscreteScheduler (`euler`) or EulerAncestralDiscreteScheduler (`euler_ancestral`: fresh noise at each step). */
  sampler: Sampler;
  num_train_timesteps: number;
  beta_start: number;
  beta_end: number;
  beta_schedule: 'scaled_linear' | 'linear';
  timestep_spacing: 'trailing' | 'leading' | 'linspace';
  steps_offset: number;
  prediction_type: 'epsilon' | 'v_prediction';
  /** Euler only: σ spaced as Karras et al. (ρ = 7) between the spaced schedule's ends (or sigma_min / sigma_max), timesteps read back from σ. */
  use_karras_sigmas: boolean;
  sigma_min?: number;
  sigma_max?: number;
  /** Euler only: σ after the last step, 0 or the training schedule's smallest. */
  final_sigmas_type: 'zero' | 'sigma_min';
}

/** What a model without a scheduler_config.json runs: SD-Turbo's. */
export const DEFAULT_SCHEDULER: SchedulerConfig = {
  sampler: 'euler',
  num_train_timesteps: 1000,
  beta_start: 0.00085,
  beta_end: 0.012,
  beta_schedule: 'scaled_linear',
  timestep_spacing: 'trailing',
  steps_offset: 1,
  prediction_type: 'epsilon',
  use_karras_sigmas: false,
  final_sigmas_type: 'zero',
};

/** The scheduler classes lserve runs, by their `_class_name`. */
export const SCHEDULER_CLASSES: Readonly<Record<string, Sampler>> = {
  EulerDiscreteScheduler: 'euler',
  EulerAncestralDiscreteScheduler: 'euler_ancestral',
};

/** A scheduler_config.json asks for something lserve does not implement; `key` names it. */
export class SchedulerConfigError extends Error {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(`scheduler_config.json: ${message}`);
    this.name = 'SchedulerConfigError';
  }
}

/**
 * Reads a diffusers scheduler_config.json as the scheduler class would: its
 * keys, diffusers' own defaults for those it leaves out (linear betas
 * 0.0001–0.02, linspace spacing, steps_offset 0, ε-prediction), keys the
 * class does not have ignored (EulerAncestralDiscreteScheduler has no Karras
 * sigmas nor final_sigmas_type, and ignores them as diffusers does). No
 * config at all (undefined) is SD-Turbo's. A value lserve cannot follow —
 * another scheduler class, trained_betas, a squaredcos_cap_v2 schedule,
 * zero-SNR rescaling, exponential or beta sigmas, log-linear interpolation,
 * continuous v-prediction timesteps, sample prediction — throws a
 * SchedulerConfigError that names the key.
 */
export function parseSchedulerConfig(raw: unknown): SchedulerConfig {
  if (raw === undefined || raw === null) return { ...DEFAULT_SCHEDULER };
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new SchedulerConfigError('', 'is not a JSON object');
  const o = raw as Record<string, unknown>;
  const has = (key: string) => o[key] !== undefined && o[key] !== null;
  const shown = (v: unknown) => (typeof v === 'string' ? `'${v}'` : JSON.stringify(v));
  const refuse = (key: string, supported: string) => new SchedulerConfigError(key, `unsupported ${key} ${shown(o[key])} (lserve supports ${supported})`);
  const oneOf = <T extends string>(key: string, allowed: readonly T[], fallback: T): T => {
    if (!has(key)) return fallback;
    if (typeof o[key] !== 'string' || !allowed.includes(o[key] as T)) throw refuse(key, allowed.map((a) => `'${a}'`).join(', '));
    return o[key] as T;
  };
  const flag = (key: string): boolean => {
    if (!has(key)) return false;
    if (typeof o[key] !== 'boolean') throw refuse(key, 'true or false');
    return o[key] as boolean;
  };
  const number = (key: string, fallback: number, ok: (v: number) => boolean, what: string): number => {
    if (!has(key)) return fallback;
    const v = o[key];
    if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v)) throw refuse(key, what);
    return v;
  };
  const optionalNumber = (key: string): number | undefined => (has(key) ? number(key, 0, (v) => v > 0, 'a positive number, or null') : undefined);

  const className = oneOf('_class_name', Object.keys(SCHEDULER_CLASSES), 'EulerDiscreteScheduler');
  const sampler = SCHEDULER_CLASSES[className]!;
  const num_train_timesteps = number('num_train_timesteps', 1000, (v) => Number.isInteger(v) && v >= 2 && v <= 100_000, 'an integer from 2 to 100000');
  const beta_start = number('beta_start', 0.0001, (v) => v > 0 && v < 1, 'a number between 0 and 1');
  const beta_end = number('beta_end', 0.02, (v) => v >= beta_start && v < 1, `a number from beta_start (${beta_start}) to 1`);
  const beta_schedule = oneOf('beta_schedule', ['scaled_linear', 'linear'] as const, 'linear');
  if (has('trained_betas')) throw refuse('trained_betas', "only betas from beta_schedule 'scaled_linear' or 'linear': trained_betas must be null");
  if (flag('rescale_betas_zero_snr')) throw refuse('rescale_betas_zero_snr', 'false only');
  const prediction_type = oneOf('prediction_type', ['epsilon', 'v_prediction'] as const, 'epsilon');
  const timestep_spacing = oneOf('timestep_spacing', ['trailing', 'leading', 'linspace'] as const, 'linspace');
  const steps_offset = number('steps_offset', 0, (v) => Number.isInteger(v) && v >= 0 && v < num_train_timesteps, 'an integer from 0 below num_train_timesteps');
  const config: SchedulerConfig = {
    sampler,
    num_train_timesteps,
    beta_start,
    beta_end,
    beta_schedule,
    timestep_spacing,
    steps_offset,
    prediction_type,
    use_karras_sigmas: false,
    final_sigmas_type: 'zero',
  };
  if (sampler === 'euler_ancestral') return config;
  oneOf('interpolation_type', ['linear'] as const, 'linear');
  if (flag('use_exponential_sigmas')) throw refuse('use_exponential_sigmas', 'false only (Karras sigmas: use_karras_sigmas)');
  if (flag('use_beta_sigmas')) throw refuse('use_beta_sigmas', 'false only (Karras sigmas: use_karras_sigmas)');
  const timestepType = oneOf('timestep_type', ['discrete', 'continuous'] as const, 'discrete');
  if (timestepType === 'continuous' && prediction_type === 'v_prediction') throw refuse('timestep_type', "'discrete' (or 'continuous' with epsilon prediction, where it changes nothing)");
  config.use_karras_sigmas = flag('use_karras_sigmas');
  config.sigma_min = optionalNumber('sigma_min');
  config.sigma_max = optionalNumber('sigma_max');
  config.final_sigmas_type = oneOf('final_sigmas_type', ['zero', 'sigma_min'] as const, 'zero');
  return config;
}

export interface Schedule {
  /** UNet timesteps, high noise first (fractional with linspace spacing and Karras sigmas; integer UNet inputs round them). */
  timesteps: number[];
  /** σ at each timestep, then the final σ (0): one longer than `timesteps`. */
  sigmas: number[];
}

interface TrainingTable {
  /** σ for every training timestep 0 … N−1 (float32 values). */
  sigmas: Float64Array;
  /** ln σ as float32, for reading timesteps back from σ (Karras). */
  logSigmas: Float64Array;
}

const tables = new Map<string, TrainingTable>();

/**
 * σ for every training timestep, as diffusers computes it in float32:
 * betas from torch.linspace, ᾱ from torch.cumprod (float32 products
 * accumulated in double), σ = √((1 − ᾱ)/ᾱ).
 */
function trainingTable(config: SchedulerConfig): TrainingTable {
  const key = `${config.num_train_timesteps}|${config.beta_start}|${config.beta_end}|${config.beta_schedule}`;
  const cached = tables.get(key);
  if (cached) return cached;
  const f = Math.fround;
  const n = config.num_train_timesteps;
  const scaled = config.beta_schedule === 'scaled_linear';
  // torch.linspace(start, end, n) in float32: a float32 step, the first half counted from start, the second back from end.
  const start = f(scaled ? Math.sqrt(config.beta_start) : config.beta_start);
  const end = f(scaled ? Math.sqrt(config.beta_end) : config.beta_end);
  const step = f(f(end - start) / (n - 1));
  const sigmas = new Float64Array(n);
  const logSigmas = new Float64Array(n);
  let cumulative = 1;
  for (let i = 0; i < n; i++) {
    const v = i < Math.floor(n / 2) ? f(start + f(step * i)) : f(end - f(step * (n - 1 - i)));
    const beta = scaled ? f(v * v) : v;
    cumulative *= f(1 - beta);
    const alphaBar = f(cumulative);
    sigmas[i] = f(Math.sqrt(f(f(1 - alphaBar) / alphaBar)));
    logSigmas[i] = f(Math.log(sigmas[i]!));
  }
  const table = { sigmas, logSigmas };
  if (tables.size > 32) tables.clear();
  tables.set(key, table);
  return table;
}

/** np.interp(t, 0…N−1, σ): linear between training timesteps, clamped at the ends. */
function sigmaAt(table: TrainingTable, t: number): number {
  const { sigmas } = table;
  const last = sigmas.length - 1;
  if (!(t > 0)) return sigmas[0]!;
  if (t >= last) return sigmas[last]!;
  const lo = Math.floor(t);
  return sigmas[lo]! + (sigmas[lo + 1]! - sigmas[lo]!) * (t - lo);
}

/** diffusers' _sigma_to_t: the fractional training timestep of σ, interpolating ln σ. */
function timestepOf(table: TrainingTable, sigma: number): number {
  const { logSigmas } = table;
  const logSigma = Math.log(Math.max(sigma, 1e-10));
  // The last training timestep whose ln σ is at most ln σ (0 when none is), kept below the last.
  let lo = 0;
  let hi = logSigmas.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (logSigmas[mid]! <= logSigma) lo = mid;
    else hi = mid - 1;
  }
  const low = Math.min(lo, logSigmas.length - 2);
  const w = Math.min(1, Math.max(0, (logSigmas[low]! - logSigma) / (logSigmas[low]! - logSigmas[low + 1]!)));
  return (1 - w) * low + w * (low + 1);
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

/**
 * The full schedule for `steps` denoising steps: diffusers'
 * set_timesteps. trailing tᵢ = round(T − i·T/N) − 1, leading tᵢ =
 * (N−1−i)·⌊T/N⌋ + steps_offset, linspace N points from T−1 down to 0 (0
 * alone at one step, as diffusers has it); σ interpolated at each; with
 * Karras sigmas, σ respaced between the ends and the timesteps read back.
 * (diffusers' trailing np.arange yields N+1 timesteps for some N — 61, 103,
 * … of 1000 — the last being −1; here there are always N.)
 */
export function schedule(config: SchedulerConfig, steps: number): Schedule {
  checkScheduledSteps(config, steps);
  const n = config.num_train_timesteps;
  return withSigmas(config, spaced(config, n, steps, n - 1, 0));
}

/**
 * `count` timesteps laid by the configured spacing over the training range
 * below `range` (T for a full schedule, s·T for strength s): trailing
 * round(range − i·range/count) − 1, leading (count−1−i)·⌊range/count⌋ +
 * steps_offset, linspace from `top` down to 0 (`single` alone at one step).
 */
function spaced(config: SchedulerConfig, range: number, count: number, top: number, single: number): number[] {
  if (config.timestep_spacing === 'trailing') {
    const ratio = range / count;
    return Array.from({ length: count }, (_, i) => roundHalfEven(range - i * ratio) - 1);
  }
  if (config.timestep_spacing === 'leading') {
    const ratio = Math.floor(range / count);
    return Array.from({ length: count }, (_, i) => (count - 1 - i) * ratio + config.steps_offset);
  }
  return linspaceDown(top, count, single);
}

/** np.linspace(0, top, k, dtype=float32) reversed: top first (`single`: the one value when k = 1). */
function linspaceDown(top: number, k: number, single: number): number[] {
  if (k === 1) return [Math.fround(single)];
  const step = top / (k - 1);
  return Array.from({ length: k }, (_, i) => Math.fround(i === 0 ? top : (k - 1 - i) * step));
}

/**
 * σ at the timesteps (np.interp over the training σ), respaced as Karras
 * sigmas when configured (between `karrasTop`, else sigma_max, else the
 * first σ, and sigma_min, else the last σ), then the final σ.
 */
function withSigmas(config: SchedulerConfig, spaced: number[], karrasTop?: number): Schedule {
  const table = trainingTable(config);
  let timesteps = spaced;
  let sigmas = spaced.map((t) => sigmaAt(table, t));
  if (config.sampler === 'euler' && config.use_karras_sigmas) {
    const rho = 7;
    const top = (karrasTop ?? config.sigma_max ?? sigmas[0]!) ** (1 / rho);
    const bottom = (config.sigma_min ?? sigmas.at(-1)!) ** (1 / rho);
    const k = sigmas.length;
    sigmas = Array.from({ length: k }, (_, i) => (top + (k === 1 ? 0 : i / (k - 1)) * (bottom - top)) ** rho);
    timesteps = sigmas.map((sigma) => timestepOf(table, sigma));
  }
  const last = config.sampler === 'euler' && config.final_sigmas_type === 'sigma_min' ? table.sigmas[0]! : 0;
  return { timesteps: timesteps.map((t) => Math.fround(t)), sigmas: [...sigmas.map((sigma) => Math.fround(sigma)), last] };
}

/**
 * The standard deviation of the starting noise of a generation from pure
 * noise (diffusers' init_noise_sigma): the largest σ, or √(σ²+1) of it
 * with leading spacing.
 */
export function initNoiseSigma(config: SchedulerConfig, sched: Schedule): number {
  const max = Math.max(...sched.sigmas);
  return config.timestep_spacing === 'leading' ? Math.fround(Math.sqrt(max * max + 1)) : max;
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
 *   points from s·(T−1) down to 0. At 1 step, strength 0.3 starts at
 *   t = 299, 0.5 at 499, 1 at 999 (σ 0.830, 1.613, 14.615 for SD-Turbo).
 *   With Karras sigmas, σ is respaced from that first σ down to sigma_min
 *   (else the last spaced σ), as the full schedule is from the top.
 *
 * Where N·s is a whole number this is exactly diffusers' img2img schedule
 * (its last N·s timesteps: steps 4, strength 0.5 → 499, 249 with trailing
 * spacing) for trailing and leading spacing without Karras sigmas.
 * Elsewhere diffusers takes the last ⌊N·s⌋ timesteps, which is none at 1
 * step below strength 1, and the start then depends on the rounded count
 * only; here it is always s·T. The earlier rule grew N to ⌈1/s⌉ so that one
 * step ran, which scheduled a billion steps for s = 1e-9; this one never
 * schedules more than N.
 */
export function partialSchedule(config: SchedulerConfig, steps: number, strength: number): Schedule {
  checkScheduledSteps(config, steps);
  if (!(strength >= 0 && strength <= 1)) throw new InvalidRequestError(`'strength' must be from 0 to 1; got ${strength}.`, { param: 'strength', code: 'invalid_value' });
  if (strength === 0) return { timesteps: [], sigmas: [0] };
  if (strength === 1) return schedule(config, steps);
  const n = config.num_train_timesteps;
  const range = strength * n;
  const run = Math.max(1, Math.min(steps, Math.round(steps * strength), Math.floor(range)));
  const top = strength * (n - 1);
  const clamped = spaced(config, range, run, top, top).map((t) => Math.min(n - 1, Math.max(0, t)));
  return withSigmas(config, clamped, sigmaAt(trainingTable(config), clamped[0]!));
}

/** The UNet's input at σ: x / √(σ² + 1). */
export function scaleInput(x: Float32Array, sigma: number, out = new Float32Array(x.length)): Float32Array {
  const k = 1 / Math.sqrt(sigma * sigma + 1);
  for (let i = 0; i < x.length; i++) out[i] = x[i]! * k;
  return out;
}

/** x̂₀, the model's prediction of the finished latents at σ from its output (ε, or v for v-prediction models). */
export function predictedOriginal(x: Float32Array, output: Float32Array, sigma: number, prediction: SchedulerConfig['prediction_type']): Float32Array {
  const x0 = new Float32Array(x.length);
  if (prediction === 'epsilon') {
    for (let i = 0; i < x.length; i++) x0[i] = x[i]! - output[i]! * sigma;
    return x0;
  }
  const c = 1 / (sigma * sigma + 1);
  const s = sigma / Math.sqrt(sigma * sigma + 1);
  for (let i = 0; i < x.length; i++) x0[i] = x[i]! * c - output[i]! * s;
  return x0;
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

/**
 * One ancestral Euler step in place (EulerAncestralDiscreteScheduler.step):
 * σ_up = √(σ_next²·(σ² − σ_next²)/σ²), σ_down = √(σ_next² − σ_up²); an
 * Euler step to σ_down, then `noise`·σ_up added (fresh standard-normal
 * noise for each step). To σ_next = 0 it is a plain Euler step.
 */
export function ancestralStep(x: Float32Array, output: Float32Array, sigma: number, sigmaNext: number, prediction: SchedulerConfig['prediction_type'], noise: Float32Array): void {
  const up = Math.sqrt(Math.max(0, (sigmaNext * sigmaNext * (sigma * sigma - sigmaNext * sigmaNext)) / (sigma * sigma)));
  const down = Math.sqrt(Math.max(0, sigmaNext * sigmaNext - up * up));
  eulerStep(x, output, sigma, down, prediction);
  if (up > 0) for (let i = 0; i < x.length; i++) x[i] = x[i]! + noise[i]! * up;
}
