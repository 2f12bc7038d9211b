import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import { OnnxSession } from '../session.js';
import { int8Plan, Unquantizable, type PlanOptions } from './candidates.js';
import { Int8Graphs } from './qdq.js';
import type { Range } from './ranges.js';

/**
 * Chooses the int8 plan a graph keeps: the first of a ladder of plans
 * (boldest first) that a caller's probe accepts, then, where that is not the
 * boldest, 8-bit activations added in the layers that bear them. The
 * layers the boldest plan adds are split into GROUPS runs in graph order;
 * each run is probed on its own on top of the accepted plan, and the runs
 * that harm least are added together while the sum of their harms stays
 * within the bound (the harms are squared errors, which add across layers
 * whose rounding is independent), then probed together; a miss drops the
 * most harmful run and probes again. All plans share one data file
 * (Int8Graphs), so a probe costs a graph's rewrite, a session and a run.
 */

/** Runs of layers probed apiece: the search's cost in probes, against how finely it can pick. */
const GROUPS = 8;
/** Combined probes of the chosen runs before the search settles for the accepted plan. */
const COMBINED_TRIES = 3;

export interface Verdict {
  accepted: boolean;
  /** Why a plan missed. */
  reason: string;
  /** The harm in units that add across layers (a relative error squared, an image's mean squared error). */
  loss: number;
}

export interface Chosen<V extends Verdict> {
  plan: PlanOptions;
  /** The ladder's plan it was (planName). */
  name: string;
  verdict: V;
  /** Bytes of the graph and the data it reads. */
  bytes: number;
  /** Layers of the boldest plan given 8-bit activations on top of those of the ladder's plan `name`, and how many it has. */
  added?: { op: string; layers: number; of: number };
}

export interface Choice<V extends Verdict> {
  chosen?: Chosen<V>;
  /** Bolder plans that missed, with why. */
  missed: string[];
}

/** A plan as a report names it: the operators with 8-bit activations, or `weights`. */
const planName = (plan: PlanOptions) => (plan.ops?.length ? plan.ops.join(' and ') : 'weights');

/**
 * Writes `graph`'s int8 forms to `target` and probes them; `target` is left
 * holding the chosen one, or removed (with its folder) when none holds.
 * `lossBound` (in the verdicts' loss units) enables the layer search.
 */
export async function choosePlan<V extends Verdict>(graph: string, target: string, ranges: ReadonlyMap<string, Range>, plans: readonly PlanOptions[], probe: (session: OnnxSession) => Promise<V>, lossBound?: number): Promise<Choice<V>> {
  const graphs = await Int8Graphs.open(graph, target, ranges);
  const missed: string[] = [];
  let chosen: Chosen<V> | undefined;
  let written: PlanOptions | undefined;
  try {
    const attempt = async (plan: PlanOptions): Promise<Chosen<V>> => {
      written = plan;
      const { bytes } = await graphs.write(plan);
      const session = await OnnxSession.create(target, { threads: 0, memoryPattern: false });
      try {
        return { plan, name: planName(plan), bytes, verdict: await probe(session) };
      } finally {
        await session.release();
      }
    };
    for (const plan of plans) {
      try {
        const tried = await attempt(plan);
        if (tried.verdict.accepted) {
          chosen = tried;
          break;
        }
        missed.push(`${planName(plan)} in int8: ${tried.verdict.reason}`);
      } catch (error) {
        if (!(error instanceof Unquantizable)) throw error;
        missed.push(`${planName(plan)} in int8: ${error.message}`);
      }
    }
    if (chosen && lossBound !== undefined && chosen.plan !== plans[0]) chosen = await addLayers(graph, plans[0]!, chosen, lossBound, attempt);
    // The target holds the last plan written; the chosen one's graph is written again (its data is there already).
    if (chosen && written !== chosen.plan) await graphs.write(chosen.plan);
  } finally {
    await graphs.close();
  }
  if (!chosen) await rm(path.dirname(target), { recursive: true, force: true });
  return { chosen, missed };
}

/** The accepted plan with 8-bit activations added in the runs of the boldest plan's extra layers that bear them (see the file's comment). */
async function addLayers<V extends Verdict>(graph: string, boldest: PlanOptions, base: Chosen<V>, lossBound: number, attempt: (plan: PlanOptions) => Promise<Chosen<V>>): Promise<Chosen<V>> {
  const model = onnxProto.onnx.ModelProto.decode(await readFile(graph));
  const activated = (plan: PlanOptions) => {
    const p = int8Plan(model, plan);
    return p.nodes.filter((n) => !p.weightsOnly.has(n));
  };
  const own = new Set(activated(base.plan).map((n) => n.name));
  const extra = activated(boldest).filter((n) => !own.has(n.name));
  if (!extra.length) return base;
  const count = Math.min(GROUPS, extra.length);
  const runs = Array.from({ length: count }, (_, i) => extra.slice(Math.round((i * extra.length) / count), Math.round(((i + 1) * extra.length) / count)));
  const planWith = (layers: readonly (typeof extra)[number][]): PlanOptions => ({ ...boldest, activationNodes: new Set([...own, ...layers.map((n) => n.name)]) });
  const probed: { layers: typeof extra; tried: Chosen<V> }[] = [];
  for (const layers of runs) {
    const tried = await attempt(planWith(layers));
    if (tried.verdict.accepted) probed.push({ layers, tried });
  }
  probed.sort((a, b) => a.tried.verdict.loss - b.tried.verdict.loss);
  // The runs whose harms, added to the accepted plan's, stay within the bound.
  let total = base.verdict.loss;
  let take = 0;
  while (take < probed.length && total + probed[take]!.tried.verdict.loss - base.verdict.loss <= lossBound) total += probed[take++]!.tried.verdict.loss - base.verdict.loss;
  const ops = [...new Set(extra.map((n) => n.opType))].join(' and ');
  const added = (layers: number) => ({ op: ops, layers, of: extra.length });
  for (let tries = 0; take > 0 && tries < COMBINED_TRIES; tries++, take--) {
    const layers = probed.slice(0, take).flatMap((p) => p.layers);
    const tried = take === 1 ? probed[0]!.tried : await attempt(planWith(layers));
    if (tried.verdict.accepted) return { ...tried, name: base.name, added: added(layers.length) };
  }
  return base;
}
