import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/compose.js';
import { onnx, type OnnxTypes } from '../fixtures/onnx/build.js';
import { withExternalData } from '../fixtures/onnx/external-data.js';
import { sdTurboFiles, TINY_SD, tinySdTurboModel, writeSdTurboFolder } from '../fixtures/onnx/sd-turbo/index.js';

/**
 * The operator check of `lserve pull` / registration (engine.prepare → the
 * onnx:image preparer → families/stable-diffusion/cpu-operators.ts): an
 * export using operators the CPU provider cannot run and lserve cannot
 * rewrite is refused, naming them, and a registered directory is
 * unregistered; an fp32 export (nothing to convert) whose UNet keeps its
 * weights in external data is rewritten into the model's folder with its
 * weights linked, not copied, and the user's folder left as it was.
 */

let dir: string;
let engine: Engine;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-sd-cpu-ops-'));
  engine = new Engine({ home: path.join(dir, 'home'), threads: 1 });
});

afterAll(async () => {
  await engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Rewrites a graph file through its decoded model. */
async function editGraph(file: string, edit: (graph: OnnxTypes.GraphProto) => void): Promise<void> {
  const model = onnx.ModelProto.decode(await readFile(file));
  edit(model.graph as OnnxTypes.GraphProto);
  await writeFile(file, onnx.ModelProto.encode(model).finish());
}

describe('operators the CPU cannot run', () => {
  it('refuses the export, naming the graph and the operators, and undoes the registration', async () => {
    const folder = path.join(dir, 'unrunnable');
    await cp(await tinySdTurboModel(), folder, { recursive: true });
    await editGraph(path.join(folder, 'unet', 'model.onnx'), (graph) => {
      const output = graph.output[0]!.name!;
      graph.node.push(
        onnx.NodeProto.create({ opType: 'BiasSoftmax', domain: 'com.microsoft', input: [output, output], output: ['softmaxed'], attribute: [{ name: 'is_inner_broadcast', type: onnx.AttributeProto.AttributeType.INT, i: 0 }] }),
        onnx.NodeProto.create({ opType: 'PackedAttention', domain: 'com.microsoft', input: ['softmaxed'], output: ['attended'] }),
      );
    });
    const { model } = await engine.store.registerDirectory(folder, { kind: 'image', id: 'unrunnable' });
    const refused = engine.prepare(model);
    await expect(refused).rejects.toMatchObject({
      code: 'unsupported_operators',
      message: expect.stringMatching(/^Image model 'unrunnable' cannot run: its unet uses com\.microsoft\.BiasSoftmax ×1, com\.microsoft\.PackedAttention ×1: operators ONNX Runtime's CPU provider has no kernel for/),
    });
    await expect(refused).rejects.toThrow(/Its registration was undone/);
    expect(await engine.store.resolve('unrunnable')).toBeUndefined();
    // The user's files stay.
    expect((await stat(path.join(folder, 'unet', 'model.onnx'))).isFile()).toBe(true);
  });
});

describe('an fp32 export with fused operators and external weights', () => {
  it('is rewritten beside the model with its weights hard-linked, and computes what its standard twin does', async () => {
    const folder = await writeSdTurboFolder(path.join(dir, 'fp32-fused'), TINY_SD, 'float32', 'fused');
    const unet = path.join(folder, 'unet', 'model.onnx');
    const external = withExternalData(await readFile(unet), 'model.onnx_data');
    await writeFile(unet, external.graph);
    await writeFile(path.join(folder, 'unet', 'model.onnx_data'), external.data);
    const before = await readdir(path.join(folder, 'unet'));

    const { model } = await engine.store.registerDirectory(folder, { kind: 'image', id: 'fp32-fused' });
    const said: string[] = [];
    const prepared = await engine.prepare(model, (line) => said.push(line));

    const rewritten = path.join(engine.store.modelDir('fp32-fused'), 'fp32', 'unet', 'model.onnx');
    expect(prepared.files.unet_fp32).toBe(rewritten);
    expect(said).toContain('  unet: already fp32');
    expect(said).toContainEqual(expect.stringMatching(/^ {2}unet: com\.microsoft\.NhwcConv ×\d+/));
    // The weights are the user's file, linked under the name the fp32 conversion uses.
    expect((await stat(`${rewritten}.data`)).ino).toBe((await stat(path.join(folder, 'unet', 'model.onnx_data'))).ino);
    expect(await readdir(path.join(folder, 'unet'))).toEqual(before);

    const run = async (graph: string | Uint8Array) => {
      const session = await ort.InferenceSession.create(graph as string, { executionProviders: ['cpu'] });
      const sample = Float32Array.from({ length: 4 * 8 * 8 }, (_, i) => Math.sin(i * 0.37));
      const context = Float32Array.from({ length: 77 * 32 }, (_, i) => Math.cos(i * 0.11) * 0.5);
      const out = await session.run({
        sample: new ort.Tensor('float32', sample, [1, 4, 8, 8]),
        timestep: new ort.Tensor('int64', BigInt64Array.from([999n]), [1]),
        encoder_hidden_states: new ort.Tensor('float32', context, [1, 77, 32]),
      });
      await session.release();
      return out.out_sample!.data as Float32Array;
    };
    const twinFile = path.join(dir, 'twin', 'unet.onnx');
    await mkdir(path.dirname(twinFile), { recursive: true });
    await writeFile(twinFile, sdTurboFiles(TINY_SD, 'float32').unet!() as Uint8Array);
    const [fused, standard] = [await run(rewritten), await run(twinFile)];
    let worst = 0;
    for (let i = 0; i < standard.length; i++) worst = Math.max(worst, Math.abs(fused[i]! - standard[i]!));
    expect(worst).toBeLessThan(1e-3);
  });
});
