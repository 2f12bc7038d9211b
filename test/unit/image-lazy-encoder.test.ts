import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/compose.js';
import { generateImages } from '../../src/core/tasks/image.js';
import type { DiffusionPipeline } from '../../src/families/stable-diffusion/diffusion-pipeline.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';

/**
 * The VAE encoder is only needed to start from an image: a loaded model
 * opens it at the first img2img or edit (its weights, and its activations
 * at 512×512, are never held by a model that only makes images from text),
 * and keeps it from then on. The synthetic SD-Turbo through the task.
 */

let dir: string;
let engine: Engine;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-sd-lazy-'));
  // In this process: the test reads the pipeline's sessions.
  engine = new Engine({ home: path.join(dir, 'home'), threads: 1, keepAliveMs: -1, isolation: 'server' });
  await engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: 'sd-lazy' });
});

afterAll(async () => {
  await engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function encoderOpened(): Promise<boolean> {
  const lease = await engine.acquire<DiffusionPipeline>('sd-lazy', ['image']);
  try {
    return lease.model.sessions.vaeEncoder!.opened;
  } finally {
    lease.release();
  }
}

describe('the VAE encoder on demand', () => {
  it('is not opened by text to image, is opened by the first img2img and then kept', async () => {
    const text = await generateImages(engine, { model: 'sd-lazy', prompt: 'a fox', size: '64x64', seed: 1 });
    expect(text.images).toHaveLength(1);
    expect(await encoderOpened()).toBe(false);

    const init = await sharp({ create: { width: 64, height: 64, channels: 3, background: { r: 200, g: 40, b: 40 } } }).png().toBuffer();
    const edited = await generateImages(engine, { model: 'sd-lazy', prompt: 'a fox', size: '64x64', seed: 1, init: { image: init, strength: 0.5 } });
    expect(edited.images).toHaveLength(1);
    expect(await encoderOpened()).toBe(true);
    const lease = await engine.acquire<DiffusionPipeline>('sd-lazy', ['image']);
    try {
      const first = await lease.model.sessions.vaeEncoder!.get();
      expect(await lease.model.sessions.vaeEncoder!.get()).toBe(first);
    } finally {
      lease.release();
    }
  });
});
