import OpenAI, { toFile } from 'openai';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { syntheticTaesdModel } from '../fixtures/onnx/sd-turbo/taesd.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The images API end to end: the synthetic SD-Turbo (the export's four
 * graphs, names, fp16 types and CLIP vocabulary; tiny channels, random
 * weights, a near-identity VAE) registered as a model directory, the real
 * ONNX Runtime and sharp, and the official OpenAI client. Images are 64x64.
 */

let server: TestServer;
let client: OpenAI;
const MODEL = 'sd-test';

beforeAll(async () => {
  // One waiting request per model, so the queue's limit can be reached.
  server = await startTestServer({ engine: { maxQueue: 1 } });
  await server.engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: MODEL });
  await server.engine.store.registerDirectory(await syntheticTaesdModel(), { kind: 'image', id: 'taesd-test' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
});

interface ImagesBody {
  created: number;
  data: Array<{ url?: string; b64_json?: string; revised_prompt?: string }>;
}

async function post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });
}

async function generate(body: Record<string, unknown>): Promise<ImagesBody> {
  const res = await post('/v1/images/generations', { model: MODEL, prompt: 'a red fox in the snow', size: '64x64', ...body });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as ImagesBody;
}

async function expectError(res: Response, status: number, code: string, param?: string): Promise<string> {
  const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  expect({ status: res.status, code: body.error.code }).toEqual({ status, code });
  expect(body.error.type).toBe(status === 404 ? 'not_found_error' : status === 503 ? 'overloaded_error' : 'invalid_request_error');
  expect(body.error.message).not.toMatch(/\n\s+at /);
  if (param) expect(body.error.param).toBe(param);
  return body.error.message;
}

const bytesOf = (item: { b64_json?: string }) => Buffer.from(item.b64_json!, 'base64');

async function pixels(image: Uint8Array): Promise<{ data: Buffer; width: number; height: number }> {
  const { data, info } = await sharp(image).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  return { data, width: info.width, height: info.height };
}

/** A smooth 64x64 test picture (colour gradients), optionally with a transparent square. */
async function picture(options: { hole?: boolean; width?: number; height?: number } = {}): Promise<Buffer> {
  const width = options.width ?? 64;
  const height = options.height ?? 64;
  const raw = Buffer.alloc(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const p = (y * width + x) * 4;
      raw[p] = 40 + Math.round((x / width) * 170);
      raw[p + 1] = 200 - Math.round((y / height) * 150);
      raw[p + 2] = 90;
      raw[p + 3] = options.hole && x >= 16 && x < 48 && y >= 16 && y < 48 ? 0 : 255;
    }
  }
  return sharp(raw, { raw: { width, height, channels: 4 } }).png().toBuffer();
}

/** A size x size picture (the gradient of `picture`) with a square of one colour from `from` to `to` (exclusive) on both axes. */
async function blockPicture(size: number, from: number, to: number, colour: number[]): Promise<Buffer> {
  const raw = Buffer.alloc(size * size * 3);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      const block = x >= from && x < to && y >= from && y < to;
      raw.set(block ? colour : [40 + Math.round((x / size) * 170), 200 - Math.round((y / size) * 150), 90], (y * size + x) * 3);
    }
  }
  return sharp(raw, { raw: { width: size, height: size, channels: 3 } }).png().toBuffer();
}

/** A 64x64 mask repainting the square 16…47: transparent there (OpenAI) or white there (no alpha). */
async function squareMask(kind: 'alpha' | 'white', size = 64): Promise<Buffer> {
  const channels = kind === 'alpha' ? 4 : 3;
  const raw = Buffer.alloc(size * size * channels, kind === 'alpha' ? 255 : 0);
  for (let y = 16; y < 48; y++) for (let x = 16; x < 48; x++) {
    const p = (y * size + x) * channels;
    if (kind === 'alpha') raw[p + 3] = 0;
    else raw.fill(255, p, p + 3);
  }
  return sharp(raw, { raw: { width: size, height: size, channels } }).png().toBuffer();
}

const inSquare = (i: number, width: number) => {
  const x = i % width;
  const y = Math.floor(i / width);
  return x >= 16 && x < 48 && y >= 16 && y < 48;
};

/** Mean absolute difference per channel value, 0–255. */
function distance(a: Buffer, b: Buffer): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
}

describe('POST /v1/images/generations', () => {
  it('answers the OpenAI client with b64_json images of the requested size', async () => {
    const res = await client.images.generate({ model: MODEL, prompt: 'a lighthouse at dusk', size: '128x64' as '256x256', response_format: 'b64_json' });
    expect(res.created).toBeGreaterThan(Date.now() / 1000 - 120);
    expect(res.data).toHaveLength(1);
    const image = await pixels(bytesOf(res.data![0]!));
    expect([image.width, image.height]).toEqual([128, 64]);
    expect(Object.keys(res.data![0]!)).toEqual(['b64_json']);
  });

  it('answers url by default: an absolute /v1/images/cache URL serving the same bytes, with type, length and cache headers', async () => {
    const viaUrl = await generate({ seed: 11 });
    const url = viaUrl.data[0]!.url!;
    expect(url).toMatch(new RegExp(`^${server.url}/v1/images/cache/[0-9a-f]{32}\\.png$`));
    const file = await fetch(url);
    expect(file.status).toBe(200);
    expect(file.headers.get('content-type')).toBe('image/png');
    const bytes = Buffer.from(await file.arrayBuffer());
    expect(Number(file.headers.get('content-length'))).toBe(bytes.length);
    expect(file.headers.get('cache-control')).toMatch(/max-age=\d+/);
    const viaB64 = await generate({ seed: 11, response_format: 'b64_json' });
    expect(bytesOf(viaB64.data[0]!).equals(bytes)).toBe(true);
  });

  it('reproduces an image bit for bit from its seed; n images use seed, seed+1, …', async () => {
    const three = await generate({ seed: 500, n: 3, response_format: 'b64_json' });
    expect(three.data).toHaveLength(3);
    const [a, b, c] = three.data.map(bytesOf);
    expect(a!.equals(b!) || b!.equals(c!)).toBe(false);
    const again = await generate({ seed: 500, response_format: 'b64_json' });
    expect(bytesOf(again.data[0]!).equals(a!)).toBe(true);
    const third = await generate({ seed: 502, response_format: 'b64_json' });
    expect(bytesOf(third.data[0]!).equals(c!)).toBe(true);
  });

  it('writes png, jpeg and webp (output_format), each served with its type', async () => {
    const magic: Record<string, [string, number[]]> = { png: ['image/png', [0x89, 0x50, 0x4e, 0x47]], jpeg: ['image/jpeg', [0xff, 0xd8, 0xff]], webp: ['image/webp', [0x52, 0x49, 0x46, 0x46]] };
    for (const [format, [type, head]] of Object.entries(magic)) {
      const body = await generate({ output_format: format, output_compression: 80, seed: 1 });
      const file = await fetch(body.data[0]!.url!);
      expect(file.headers.get('content-type')).toBe(type);
      expect([...new Uint8Array(await file.arrayBuffer()).subarray(0, head.length)]).toEqual(head);
    }
  });

  it('runs several steps, classifier-free guidance with a negative prompt, and the tiny VAE decoder', async () => {
    const one = bytesOf((await generate({ seed: 3, response_format: 'b64_json' })).data[0]!);
    const four = bytesOf((await generate({ seed: 3, steps: 4, response_format: 'b64_json' })).data[0]!);
    const guided = bytesOf((await generate({ seed: 3, guidance_scale: 4, negative_prompt: 'blurry', response_format: 'b64_json' })).data[0]!);
    const tiny = bytesOf((await generate({ seed: 3, vae: 'taesd-test', response_format: 'b64_json' })).data[0]!);
    for (const other of [four, guided, tiny]) expect(other.equals(one)).toBe(false);
    expect((await pixels(tiny)).width).toBe(64);
  });

  it("decodes quality low and medium with the installed latent decoder, the other qualities with the model's VAE; an explicit vae wins", async () => {
    const image = async (body: Record<string, unknown>) => {
      const res = await post('/v1/images/generations', { model: MODEL, prompt: 'a red fox in the snow', size: '64x64', seed: 21, response_format: 'b64_json', ...body });
      expect(res.status, await res.clone().text()).toBe(200);
      return { decoder: res.headers.get('lserve-image-decoder'), bytes: bytesOf(((await res.json()) as ImagesBody).data[0]!) };
    };
    const full = await image({});
    const tiny = await image({ vae: 'taesd-test' });
    expect([full.decoder, tiny.decoder]).toEqual(['vae', 'taesd-test']);
    expect(tiny.bytes.equals(full.bytes)).toBe(false);
    // The only latent decoder installed here is 'taesd-test' (the catalog's 'taesd' is preferred where installed).
    for (const quality of ['low', 'medium']) {
      const got = await image({ quality });
      expect(got.decoder, quality).toBe('taesd-test');
      expect(got.bytes.equals(tiny.bytes), quality).toBe(true);
    }
    for (const quality of ['high', 'auto', 'standard', 'hd', null]) {
      const got = await image({ quality });
      expect(got.decoder, String(quality)).toBe('vae');
      expect(got.bytes.equals(full.bytes), String(quality)).toBe(true);
    }
    expect((await image({ quality: 'high', vae: 'taesd-test' })).decoder).toBe('taesd-test');
    // Through the OpenAI client, and on an edit's multipart form.
    const viaClient = await client.images.generate({ model: MODEL, prompt: 'a red fox in the snow', size: '64x64' as '256x256', quality: 'low', response_format: 'b64_json', seed: 21 } as OpenAI.ImageGenerateParamsNonStreaming);
    expect(bytesOf(viaClient.data![0]!).equals(tiny.bytes)).toBe(true);
    const edit = await client.images
      .edit({ model: MODEL, prompt: 'a window', image: await toFile(await picture({ hole: true }), 'in.png'), quality: 'medium', response_format: 'b64_json' })
      .withResponse();
    expect(edit.response.headers.get('lserve-image-decoder')).toBe('taesd-test');
  });

  it('accepts negative_prompt whatever the guidance, and uses it only when guidance runs (above 1), as diffusers does', async () => {
    // SD-Turbo's default guidance is 0: the negative prompt is accepted (clients that always send one work) and changes nothing.
    const plain = bytesOf((await generate({ seed: 8, response_format: 'b64_json' })).data[0]!);
    for (const guidance_scale of [undefined, 0, 1]) {
      const withNegative = bytesOf((await generate({ seed: 8, negative_prompt: 'blurry, low quality', guidance_scale, response_format: 'b64_json' })).data[0]!);
      expect(withNegative.equals(plain)).toBe(true);
    }
    const guided = async (negative_prompt: string) => bytesOf((await generate({ seed: 8, guidance_scale: 3, negative_prompt, response_format: 'b64_json' })).data[0]!);
    expect((await guided('blurry, low quality')).equals(await guided(''))).toBe(false);
  });

  it('gives revised_prompt (what the model read) only when the prompt was cut', async () => {
    expect((await generate({})).data[0]!.revised_prompt).toBeUndefined();
    const long = `a castle ${'with many towers and flags '.repeat(20)}`;
    const revised = (await generate({ prompt: long })).data[0]!.revised_prompt!;
    expect(revised.length).toBeGreaterThan(20);
    expect(long.toLowerCase().replace(/\s+/g, ' ').startsWith(revised)).toBe(true);
  });

  it('uses the installed image model when none is named', async () => {
    const res = await post('/v1/images/generations', { prompt: 'a boat', size: '64x64' });
    expect(res.status).toBe(200);
  });
});

describe('POST /v1/images/img2img', () => {
  it('stays close to the init image at low strength and leaves it at full strength (multipart and JSON)', async () => {
    const init = await picture();
    const original = (await pixels(init)).data;
    const at = async (strength: number) => {
      const form = new FormData();
      form.append('image', new Blob([new Uint8Array(init)], { type: 'image/png' }), 'init.png');
      for (const [k, v] of Object.entries({ model: MODEL, prompt: 'a painting', strength: String(strength), steps: '4', seed: '9', response_format: 'b64_json' })) form.append(k, v);
      const res = await fetch(`${server.url}/v1/images/img2img`, { method: 'POST', body: form });
      expect(res.status, await res.clone().text()).toBe(200);
      return (await pixels(bytesOf(((await res.json()) as ImagesBody).data[0]!))).data;
    };
    const none = distance(await at(0), original);
    const low = distance(await at(0.1), original);
    const half = distance(await at(0.5), original);
    const full = distance(await at(1), original);
    expect(none).toBeLessThan(4); // the VAE round trip alone
    expect(low).toBeLessThan(30);
    expect(low).toBeLessThan(half);
    expect(full).toBeGreaterThan(2 * low);

    const json = await post('/v1/images/img2img', { model: MODEL, prompt: 'a painting', image: `data:image/png;base64,${init.toString('base64')}`, strength: 0.1, steps: 4, seed: 9, response_format: 'b64_json' });
    expect(json.status).toBe(200);
    expect(distance((await pixels(bytesOf(((await json.json()) as ImagesBody).data[0]!))).data, await at(0.1))).toBe(0);
  });

  it('refuses a bad strength, a missing or undecodable image, and a mask', async () => {
    const init = (await picture()).toString('base64');
    await expectError(await post('/v1/images/img2img', { model: MODEL, prompt: 'x', image: init, strength: 1.5 }), 400, 'invalid_value', 'strength');
    await expectError(await post('/v1/images/img2img', { model: MODEL, prompt: 'x' }), 400, 'missing_required_parameter', 'image');
    await expectError(await post('/v1/images/img2img', { model: MODEL, prompt: 'x', image: Buffer.from('not an image at all').toString('base64') }), 400, 'invalid_image', 'image');
    await expectError(await post('/v1/images/img2img', { model: MODEL, prompt: 'x', image: init, mask: init }), 400, 'unsupported_parameter', 'mask');
  });
});

describe('POST /v1/images/edits', () => {
  it('repaints the transparent part of the mask through the OpenAI client and returns every other pixel exactly', async () => {
    const image = await picture();
    const original = await pixels(image);
    const res = await client.images.edit({
      model: MODEL,
      prompt: 'a window',
      image: await toFile(image, 'image.png', { type: 'image/png' }),
      mask: await toFile(await squareMask('alpha'), 'mask.png', { type: 'image/png' }),
      response_format: 'b64_json',
    });
    const edited = await pixels(bytesOf(res.data![0]!));
    let kept = 0;
    let changed = 0;
    for (let i = 0; i < 64 * 64; i++) {
      const same = edited.data.subarray(i * 3, i * 3 + 3).equals(original.data.subarray(i * 3, i * 3 + 3));
      if (!inSquare(i, 64)) expect(same).toBe(true);
      else if (same) kept++;
      else changed++;
    }
    expect(changed).toBeGreaterThan(kept);
  });

  it('reads a mask without alpha as white = repaint, and an image with transparency as its own mask', async () => {
    const image = await picture();
    const original = (await pixels(image)).data;
    const form = new FormData();
    form.append('image[]', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'image.png');
    form.append('mask', new Blob([new Uint8Array(await squareMask('white'))], { type: 'image/png' }), 'mask.png');
    for (const [k, v] of Object.entries({ model: MODEL, prompt: 'a door', seed: '4', response_format: 'b64_json' })) form.append(k, v);
    const white = await fetch(`${server.url}/v1/images/edits`, { method: 'POST', body: form });
    expect(white.status, await white.clone().text()).toBe(200);
    const whiteResult = (await pixels(bytesOf(((await white.json()) as ImagesBody).data[0]!))).data;

    const holed = await picture({ hole: true });
    const own = await post('/v1/images/edits', { model: MODEL, prompt: 'a door', seed: 4, image: holed.toString('base64'), response_format: 'b64_json' });
    expect(own.status).toBe(200);
    const ownResult = (await pixels(bytesOf(((await own.json()) as ImagesBody).data[0]!))).data;
    for (const result of [whiteResult, ownResult]) {
      for (let i = 0; i < 64 * 64; i++) {
        if (!inSquare(i, 64)) expect(result.subarray(i * 3, i * 3 + 3).equals(original.subarray(i * 3, i * 3 + 3))).toBe(true);
      }
      expect(distance(result, original)).toBeGreaterThan(1);
    }
  });

  /**
   * Inpainting as diffusers does it for a 4-channel UNet (mask on the latent
   * grid, kept latents reset to the noised original after every step, the
   * original pasted back outside the mask). The synthetic model's weights are
   * random, so "repainted" means: inside the mask the old content is gone
   * (far from the block's colour), outside it every pixel is the input's.
   */
  it('paints over a colour block inside the mask, and returns every pixel outside it as sent', async () => {
    const BLOCK = [220, 30, 30];
    const image = await blockPicture(64, 16, 48, BLOCK);
    const original = (await pixels(image)).data;
    const res = await post('/v1/images/edits', {
      model: MODEL,
      prompt: 'a clear blue sky',
      seed: 1,
      image: image.toString('base64'),
      mask: (await squareMask('alpha')).toString('base64'),
      response_format: 'b64_json',
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const edited = (await pixels(bytesOf(((await res.json()) as ImagesBody).data[0]!))).data;
    let distance = 0;
    let ghosts = 0;
    let masked = 0;
    let outsideWorst = 0;
    for (let i = 0; i < 64 * 64; i++) {
      const p = edited.subarray(i * 3, i * 3 + 3);
      if (inSquare(i, 64)) {
        const d = Math.hypot(p[0]! - BLOCK[0]!, p[1]! - BLOCK[1]!, p[2]! - BLOCK[2]!);
        distance += d;
        if (d < 40) ghosts++;
        masked++;
      } else {
        for (let c = 0; c < 3; c++) outsideWorst = Math.max(outsideWorst, Math.abs(p[c]! - original[i * 3 + c]!));
      }
    }
    // Mean RGB distance (0–441) from the block's colour inside the mask: above 100; at most 1 pixel in 10 still near it (the 1-pixel feather ring).
    expect(distance / masked).toBeGreaterThan(100);
    expect(ghosts / masked).toBeLessThan(0.1);
    // Outside the mask: equal to the input (tolerance 0 of 255).
    expect(outsideWorst).toBe(0);
  });

  it('repaints a 24-pixel hole in a 512x512 image measurably', async () => {
    const size = 512;
    const [from, to] = [244, 268];
    const image = await blockPicture(size, from, to, [30, 30, 220]);
    const original = (await pixels(image)).data;
    const raw = Buffer.alloc(size * size * 4, 255);
    for (let y = from; y < to; y++) for (let x = from; x < to; x++) raw[(y * size + x) * 4 + 3] = 0;
    const mask = await sharp(raw, { raw: { width: size, height: size, channels: 4 } }).png().toBuffer();
    const res = await post('/v1/images/edits', { model: MODEL, prompt: 'a yellow flower', seed: 2, image: image.toString('base64'), mask: mask.toString('base64'), response_format: 'b64_json' });
    expect(res.status, await res.clone().text()).toBe(200);
    const edited = (await pixels(bytesOf(((await res.json()) as ImagesBody).data[0]!))).data;
    let change = 0;
    let outsideChanged = 0;
    for (let y = 0; y < size; y++) {
      for (let x = 0; x < size; x++) {
        const p = (y * size + x) * 3;
        const d = Math.hypot(edited[p]! - original[p]!, edited[p + 1]! - original[p + 1]!, edited[p + 2]! - original[p + 2]!);
        if (x >= from && x < to && y >= from && y < to) change += d;
        else if (d > 0) outsideChanged++;
      }
    }
    // Mean RGB distance from the input over the 24x24 hole: above 60 (of 441).
    expect(change / (24 * 24)).toBeGreaterThan(60);
    expect(outsideChanged).toBe(0);
  });

  it('refuses a mask with nothing to edit: fully opaque with an alpha channel, or all black without one', async () => {
    const image = (await picture()).toString('base64');
    const opaque = await sharp({ create: { width: 64, height: 64, channels: 4, background: { r: 255, g: 255, b: 255, alpha: 1 } } }).png().toBuffer();
    const black = await sharp({ create: { width: 64, height: 64, channels: 3, background: { r: 0, g: 0, b: 0 } } }).png().toBuffer();
    const edit = (mask: Buffer) => post('/v1/images/edits', { model: MODEL, prompt: 'x', image, mask: mask.toString('base64') });
    expect(await expectError(await edit(opaque), 400, 'empty_mask', 'mask')).toMatch(/nothing to edit.*alpha channel.*transparent/);
    expect(await expectError(await edit(black), 400, 'empty_mask', 'mask')).toMatch(/nothing to edit.*no alpha channel.*white/);
  });

  it('refuses a mask of another size, a missing mask on an opaque image, several images, and no image', async () => {
    const image = await picture();
    const form = (fields: Record<string, string>, files: Array<[string, Buffer]>) => {
      const f = new FormData();
      for (const [name, bytes] of files) f.append(name, new Blob([new Uint8Array(bytes)], { type: 'image/png' }), `${name}.png`);
      for (const [k, v] of Object.entries({ model: MODEL, prompt: 'x', ...fields })) f.append(k, v);
      return fetch(`${server.url}/v1/images/edits`, { method: 'POST', body: f });
    };
    const message = await expectError(await form({}, [['image', image], ['mask', await squareMask('alpha', 128)]]), 400, 'mask_size_mismatch', 'mask');
    expect(message).toMatch(/128x128.*64x64/);
    await expectError(await form({}, [['image', image]]), 400, 'missing_required_parameter', 'mask');
    await expectError(await form({}, [['image[]', image], ['image[]', image]]), 400, 'unsupported_parameter', 'image');
    await expectError(await form({}, []), 400, 'missing_required_parameter', 'image');
    await expectError(await form({}, [['image', Buffer.from('GIF89a broken')], ['mask', await squareMask('alpha')]]), 400, 'invalid_image', 'image');
  });
});

describe('bad requests', () => {
  it('answers every bad field with its status and code, and keeps serving', async () => {
    const gen = (body: Record<string, unknown>) => post('/v1/images/generations', { model: MODEL, prompt: 'x', size: '64x64', ...body });
    const sizeMessage = await expectError(await gen({ size: '100x100' }), 400, 'invalid_size', 'size');
    expect(sizeMessage).toMatch(/multiple of 64 from 64 to 768/);
    await expectError(await gen({ size: '1024x1024' }), 400, 'invalid_size', 'size');
    await expectError(await gen({ size: 'large' }), 400, 'invalid_size', 'size');
    await expectError(await gen({ n: 5 }), 400, 'invalid_value', 'n');
    await expectError(await gen({ n: 0 }), 400, 'invalid_value', 'n');
    await expectError(await gen({ steps: 9 }), 400, 'invalid_value', 'steps');
    await expectError(await gen({ response_format: 'xml' }), 400, 'invalid_value', 'response_format');
    await expectError(await gen({ output_format: 'gif' }), 400, 'invalid_value', 'output_format');
    await expectError(await gen({ prompt: '   ' }), 400, 'missing_required_parameter', 'prompt');
    await expectError(await gen({ prompt: undefined }), 400, 'missing_required_parameter', 'prompt');
    await expectError(await gen({ style: 'vivid' }), 400, 'unsupported_parameter', 'style');
    await expectError(await gen({ stream: 'yes' }), 400, 'invalid_value', 'stream');
    await expectError(await gen({ model: 'no-such-model' }), 404, 'model_not_found', 'model');
    await expectError(await gen({ model: 'ppocr-v4-mobile' }), 400, 'wrong_model_kind', 'model');
    await expectError(await gen({ model: 'taesd-test' }), 400, 'wrong_model_kind', 'model');
    await expectError(await gen({ vae: MODEL }), 400, 'wrong_model_kind', 'vae');
    const qualityMessage = await expectError(await gen({ quality: 'ultra' }), 400, 'invalid_value', 'quality');
    expect(qualityMessage).toMatch(/low, medium, high, auto, standard, hd/);
    await expectError(await gen({ partial_images: 4, stream: true }), 400, 'invalid_value', 'partial_images');
    await expectError(await gen({ partial_images: -1 }), 400, 'invalid_value', 'partial_images');
    expect((await gen({})).status).toBe(200);
  });
});

describe('GET /v1/images/cache/:filename', () => {
  it('serves only names it wrote: traversal, encoded separators, absolute paths and unknown names are 404', async () => {
    const url = new URL((await generate({})).data[0]!.url!);
    const name = url.pathname.split('/').pop()!;
    for (const bad of ['..%2F..%2Fmodels%2Fsd-test%2Fmanifest.json', '%2Fetc%2Fpasswd', '..', '%2e%2e', `${'0'.repeat(32)}.png`, name.toUpperCase(), `${name}%00.png`, `..%2F${name}`, `${name.slice(0, -4)}.jpg`]) {
      const res = await fetch(`${server.url}/v1/images/cache/${bad}`);
      expect(res.status, bad).toBe(404);
    }
    expect((await fetch(`${server.url}/v1/images/cache/${name}`)).status).toBe(200);
  });

  it('answers HEAD, byte ranges and revalidation (304) with the image type', async () => {
    const url = (await generate({})).data[0]!.url!;
    const whole = Buffer.from(await (await fetch(url)).arrayBuffer());
    const head = await fetch(url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toBe('image/png');
    expect(head.headers.get('content-length')).toBe(String(whole.length));
    expect(head.headers.get('x-content-type-options')).toBe('nosniff');
    const ranged = await fetch(url, { headers: { range: 'bytes=1-3' } });
    expect(ranged.status).toBe(206);
    expect(Buffer.from(await ranged.arrayBuffer()).toString('latin1')).toBe('PNG');
    // max-age=0: a browser's reload (fetch alone would add no-cache, which skips the validators).
    const fresh = await fetch(url, { headers: { 'if-none-match': head.headers.get('etag')!, 'cache-control': 'max-age=0' } });
    expect(fresh.status).toBe(304);
  });

  it('expires files after the configured time', async () => {
    // The TTL is set from how long a generation and the fetch of its file take on this machine now (the
    // server above, warmed first): the file is fetched well inside it, and its expiry is waited out.
    await generate({});
    const baselineFrom = Date.now();
    expect((await fetch((await generate({})).data[0]!.url!)).status).toBe(200);
    const ttlMs = Math.max(1000, 10 * (Date.now() - baselineFrom));
    process.env.LSERVE_IMAGE_CACHE_TTL = `${ttlMs}ms`;
    const short = await startTestServer();
    delete process.env.LSERVE_IMAGE_CACHE_TTL;
    try {
      await short.engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: MODEL });
      const generateUrl = async () => {
        const res = await fetch(`${short.url}/v1/images/generations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'x', size: '64x64' }) });
        return ((await res.json()) as ImagesBody).data[0]!.url!;
      };
      await generateUrl(); // loads the model: the timed generation below runs as warm as the baseline
      const asked = Date.now();
      const url = await generateUrl();
      const answered = Date.now();
      // The file was written between `asked` and `answered`: it is served until asked + TTL at least,
      // and gone from answered + TTL on.
      expect((await fetch(url)).status).toBe(200);
      await sleepUntil(asked + ttlMs / 2);
      expect((await fetch(url)).status).toBe(200);
      await sleepUntil(answered + ttlMs + 50);
      expect((await fetch(url)).status).toBe(404);
    } finally {
      await short.stop();
    }
  });
});

describe('long generations', () => {
  const long = { size: '512x512', n: 4, steps: 4, response_format: 'b64_json' };

  it('stops a generation at the next step when its client disconnects, and frees the model', async () => {
    const controller = new AbortController();
    const pending = post('/v1/images/generations', { model: MODEL, prompt: 'x', ...long }, controller.signal).catch((e: unknown) => e);
    await waitFor(() => server.engine.manager.loaded().some((m) => m.id === MODEL && m.activeRequests > 0));
    await new Promise((r) => setTimeout(r, 300));
    controller.abort();
    expect(await pending).toBeInstanceOf(Error);
    await waitFor(() => server.logs.some((l) => /image generation stopped \(client gone\) at step \d+\/4 of image \d\/4/.test(l)));
    const line = server.logs.find((l) => l.includes('image generation stopped'))!;
    // It stopped before the last step of the last image.
    expect(line).not.toMatch(/step 4\/4 of image 4\/4/);
    expect((await generate({})).data).toHaveLength(1);
  });

  it('answers other endpoints during a generation, and 503s requests beyond the queue', async () => {
    let finished = 0;
    const first = post('/v1/images/generations', { model: MODEL, prompt: 'x', ...long }).then((r) => ((finished = Date.now()), r));
    await waitFor(() => server.engine.manager.loaded().some((m) => m.id === MODEL && m.activeRequests > 0));
    const started = Date.now();
    const models = await fetch(`${server.url}/v1/models`);
    expect(models.status).toBe(200);
    const answered = Date.now();
    const second = post('/v1/images/generations', { model: MODEL, prompt: 'y', size: '64x64' });
    await waitFor(() => server.engine.manager.loaded().some((m) => m.id === MODEL && m.activeRequests >= 2));
    await expectError(await post('/v1/images/generations', { model: MODEL, prompt: 'z', size: '64x64' }), 503, 'overloaded');
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    // A blocked event loop would hold /v1/models until the generation ends; measured against the rest of that
    // generation, so a loaded machine slows both sides alike.
    expect(answered - started).toBeLessThan((finished - started) / 4);
  });
});

async function sleepUntil(time: number): Promise<void> {
  await new Promise((r) => setTimeout(r, Math.max(0, time - Date.now())));
}

async function waitFor(condition: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}
