import { MAX_GUIDANCE_SCALE, MAX_IMAGE_SIDE, MAX_STEPS, SIZE_STEP } from './options.js';

/**
 * The request defaults a user may set on their own image model at `lserve
 * pull ./dir --kind image --default steps=4 --default guidance_scale=1`:
 * what the export's configs cannot say (a distilled model's step count and
 * guidance), or a size other than its native one. Each value is checked on
 * its own here and against the others once merged (checkImageDefaults); the
 * model's internals (VAE factors, latent channels) cannot be set.
 */

const SIDE = { integer: true, min: SIZE_STEP, max: MAX_IMAGE_SIDE, step: SIZE_STEP } as const;
const STEPS = { integer: true, min: 1, max: MAX_STEPS } as const;

const KEYS: Record<string, { integer: boolean; min: number; max: number; step?: number }> = {
  width: SIDE,
  height: SIDE,
  min_size: SIDE,
  max_size: SIDE,
  steps: STEPS,
  max_steps: STEPS,
  guidance_scale: { integer: false, min: 0, max: MAX_GUIDANCE_SCALE },
};

export const IMAGE_DEFAULT_KEYS = Object.keys(KEYS);

/** `key=value` pairs → defaults; throws an Error naming the pair and the valid range. */
export function parseImageDefaults(pairs: readonly string[]): Record<string, number> {
  const defaults: Record<string, number> = {};
  for (const pair of pairs) {
    const match = /^([a-z_]+)=(.+)$/.exec(pair.trim());
    const spec = match ? KEYS[match[1]!] : undefined;
    if (!match || !spec) throw new Error(`--default takes key=value with a key among ${IMAGE_DEFAULT_KEYS.join(', ')}; got '${pair}'`);
    const [, key, text] = match;
    const value = Number(text);
    const ok = Number.isFinite(value) && (!spec.integer || Number.isInteger(value)) && value >= spec.min && value <= spec.max && (!spec.step || value % spec.step === 0);
    if (!ok) {
      const kind = spec.step ? `a multiple of ${spec.step}` : spec.integer ? 'an integer' : 'a number';
      throw new Error(`--default ${key!} must be ${kind} from ${spec.min} to ${spec.max}; got '${text!}'`);
    }
    defaults[key!] = value;
  }
  return defaults;
}

/** Whether merged defaults hold together; throws an Error saying which do not. */
export function checkImageDefaults(defaults: Record<string, unknown>): void {
  const num = (key: string) => Number(defaults[key]);
  const [minSide, maxSide] = [num('min_size'), num('max_size')];
  if (minSide > maxSide) throw new Error(`min_size ${minSide} is above max_size ${maxSide}`);
  for (const side of ['width', 'height']) {
    if (num(side) < minSide || num(side) > maxSide) throw new Error(`${side} ${num(side)} is outside min_size ${minSide} to max_size ${maxSide}`);
  }
  if (num('steps') > num('max_steps')) throw new Error(`steps ${num('steps')} is above max_steps ${num('max_steps')}`);
}
