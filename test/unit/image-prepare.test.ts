import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/compose.js';
import { checkScheduler } from '../../src/families/stable-diffusion/prepare.js';
import { SD_TURBO_SCHEDULER, tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';

/**
 * The scheduler check of `lserve pull` / registration (engine.prepare → the
 * onnx:image preparer) and of loading: a scheduler_config.json the samplers
 * cannot follow is refused with a message naming its key, and a directory
 * being registered is not registered. Copies of the synthetic SD-Turbo with
 * their scheduler config rewritten.
 */

let dir: string;
let engine: Engine;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-sd-prepare-'));
  engine = new Engine({ home: path.join(dir, 'home'), threads: 1 });
});

afterAll(async () => {
  await engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A copy of the tiny SD-Turbo export whose scheduler_config.json is `config`. */
async function exportWith(name: string, config: Record<string, unknown>): Promise<string> {
  const target = path.join(dir, name);
  await cp(await tinySdTurboModel(), target, { recursive: true });
  await writeFile(path.join(target, 'scheduler', 'scheduler_config.json'), JSON.stringify(config));
  return target;
}

describe('scheduler check at registration', () => {
  it.each([
    ['_class_name', { ...SD_TURBO_SCHEDULER, _class_name: 'PNDMScheduler' }, /unsupported _class_name 'PNDMScheduler'/],
    ['beta_schedule', { ...SD_TURBO_SCHEDULER, beta_schedule: 'squaredcos_cap_v2' }, /unsupported beta_schedule 'squaredcos_cap_v2'/],
    ['use_exponential_sigmas', { ...SD_TURBO_SCHEDULER, use_exponential_sigmas: true }, /unsupported use_exponential_sigmas true/],
  ])('refuses an unsupported %s, naming it, and leaves the directory unregistered', async (key, config, message) => {
    const folder = await exportWith(`bad-${key}`, config);
    const { model } = await engine.store.registerDirectory(folder, { kind: 'image', id: `bad-${key.replace(/_/g, '')}` });
    const refused = engine.prepare(model);
    await expect(refused).rejects.toMatchObject({ code: 'unsupported_scheduler', message: expect.stringMatching(message) });
    await expect(refused).rejects.toThrow(/Its registration was undone/);
    expect(await engine.store.resolve(model.id)).toBeUndefined();
  });

  it('accepts Euler ancestral, Karras sigmas and v-prediction configs', async () => {
    for (const config of [
      { ...SD_TURBO_SCHEDULER, _class_name: 'EulerAncestralDiscreteScheduler', timestep_spacing: 'leading' },
      { ...SD_TURBO_SCHEDULER, use_karras_sigmas: true, prediction_type: 'v_prediction', final_sigmas_type: 'sigma_min' },
    ]) {
      const folder = await exportWith(`ok-${String(config._class_name)}-${String(config.use_karras_sigmas)}`, config);
      const { model } = await engine.store.registerDirectory(folder, { kind: 'image', id: `ok-${String(config.use_karras_sigmas)}` });
      await expect(checkScheduler(engine.store, model)).resolves.toBeUndefined();
    }
  });

  it('refuses at load a model registered without the check', async () => {
    const folder = await exportWith('bad-at-load', { ...SD_TURBO_SCHEDULER, timestep_spacing: 'even' });
    await engine.store.registerDirectory(folder, { kind: 'image', id: 'bad-at-load' });
    await expect(engine.acquire('bad-at-load', ['image'])).rejects.toMatchObject({ code: 'unsupported_scheduler', message: expect.stringMatching(/unsupported timestep_spacing 'even'/) });
  });
});
