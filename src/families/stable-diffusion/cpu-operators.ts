import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { MANIFEST, type InstalledModel, type Manifest, type ModelStore } from '../../core/store.js';
import { GRAPH_ROLES } from './roles.js';

/**
 * The last step of an image model's preparation at pull (prepare.ts), after
 * the fp16 → fp32 conversion: exports made for a GPU runtime (the catalog's
 * sd-turbo was optimised for ONNX Runtime Web) carry fused `com.microsoft`
 * operators, several of which ONNX Runtime's CPU provider has no kernel for,
 * so a session could not even be created. Each graph the loader opens is
 * rewritten where needed (runtimes/onnx/cpu-rewrite.ts: GroupNorm,
 * SkipGroupNorm, BiasSplitGelu, BiasAdd, GemmFastGelu, NhwcConv, packed
 * MultiHeadAttention become the standard operators they stand for) into
 * `<model dir>/fp32/<role>/model.onnx`, recorded as `<role>_fp32`; a graph
 * with anything else the CPU cannot run refuses the model, naming the
 * operators.
 */

/** A graph uses operators the CPU provider cannot run and lserve cannot rewrite; the message names them. */
export class UnsupportedOperators extends Error {}

const tally = (counts: Record<string, number>) => Object.entries(counts).map(([op, n]) => `${op} ×${n}`).join(', ');

async function sizeOf(file: string): Promise<number> {
  return stat(file).then((s) => s.size, () => 0);
}

export async function rewriteGraphsForCpu(store: ModelStore, installed: InstalledModel, say: (line: string) => void): Promise<InstalledModel> {
  // The rewriter (protobuf) loads only for image models being prepared.
  const { rewriteFileForCpu } = await import('../../runtimes/onnx/cpu-rewrite-file.js');
  const dir = store.modelDir(installed.id);
  const rewritten: Manifest['files'] = {};
  const refused: string[] = [];
  for (const role of GRAPH_ROLES) {
    const graph = installed.files[`${role}_fp32`] ?? installed.files[role];
    if (!graph) continue;
    const name = path.posix.join('fp32', role, 'model.onnx');
    const target = path.join(dir, name);
    const result = await rewriteFileForCpu(graph, target);
    if (Object.keys(result.unsupported).length) {
      refused.push(`its ${role} uses ${tally(result.unsupported)}`);
      continue;
    }
    // Nothing to rewrite (the graph may be the fp32 conversion, rewritten in place when it is).
    if (!Object.keys(result.rewritten).length) continue;
    if (!Object.keys(rewritten).length) say(`Rewriting ${installed.id}'s fused GPU operators (ONNX Runtime's CPU provider has no kernels for them) into standard ONNX operators:`);
    say(`  ${role}: ${tally(result.rewritten)}`);
    rewritten[`${role}_fp32`] = { name, size: (await sizeOf(target)) + (await sizeOf(`${target}.data`)) };
  }
  if (refused.length) throw new UnsupportedOperators(`${refused.join('; ')}: operators ONNX Runtime's CPU provider has no kernel for, which lserve cannot rewrite into standard operators`);
  if (!Object.keys(rewritten).length) return installed;
  const manifestPath = path.join(dir, MANIFEST);
  const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as Manifest;
  Object.assign(manifest.files, rewritten);
  await store.writeManifest(installed.id, manifest);
  return (await store.resolve(installed.id)) ?? installed;
}
