import type { LoadedModel } from '../../core/loader.js';
import type { CallName, MethodTable, StreamName } from './contract.js';

/**
 * The runner's side of a model: what child.ts serves, whatever the kind.
 * Each kind says what its model offers in a table written against its task
 * interface (kinds/<kind>.ts: `serveChat`, `serveTranscriber`, …); this turns
 * that table into the `loaded` message's lists and runs the calls that name
 * its methods.
 */

/** What a kind's runner side offers of its loaded model `M`, with properties `P`. */
export interface Exposure<M, P extends { memoryBytes: number }> {
  /** Properties read once, after the load (the model's fixed facts). */
  props: P;
  /** Properties read again after every call event and sent when changed (chat's queue depth). */
  live?: () => Record<string, unknown>;
  /** Every method of M, bound to the model's own; undefined where M makes it optional and the model lacks it. */
  methods: MethodTable<M>;
  /** Parts with methods of their own (a Transcriber's voice activity detector), each a method table of its interface, or undefined when the model has none. */
  parts?: Record<string, object | undefined>;
}

type Bound = (...args: unknown[]) => unknown;

/** The functions of a method table, by name (undefined entries, the methods a model lacks, left out). */
function functionsOf(table: object, prefix = ''): Array<[string, Bound]> {
  return Object.entries(table).flatMap(([name, value]: [string, unknown]): Array<[string, Bound]> => (typeof value === 'function' ? [[prefix + name, (...args) => Reflect.apply(value, undefined, args)]] : []));
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}

export class Served {
  /** Properties read once after the load. */
  readonly props: Record<string, unknown>;
  /** The methods the loaded model has. */
  readonly methods: string[];
  /** Its parts' methods, by part. */
  readonly parts: Record<string, string[]> = {};
  private readonly table: Map<string, Bound>;
  private readonly readLive: (() => Record<string, unknown>) | undefined;

  constructor(exposure: Exposure<unknown, { memoryBytes: number }>) {
    this.props = { ...exposure.props };
    this.readLive = exposure.live;
    const own = functionsOf(exposure.methods);
    this.methods = own.map(([name]) => name);
    const entries = [...own];
    for (const [part, table] of Object.entries(exposure.parts ?? {})) {
      if (!table) continue;
      const methods = functionsOf(table, `${part}.`);
      this.parts[part] = methods.map(([path]) => path.slice(part.length + 1));
      entries.push(...methods);
    }
    this.table = new Map(entries);
  }

  /** Live properties' values now (none for most kinds). */
  live(): Record<string, unknown> {
    return this.readLive?.() ?? {};
  }

  /** Whether the model has live properties. */
  get hasLive(): boolean {
    return this.readLive !== undefined;
  }

  /** Calls the method at `path` (`generate`, or a part's `vad.probabilities`) with a call's decoded arguments. */
  async call(path: string, args: unknown[]): Promise<unknown> {
    return await this.method(path)(...args);
  }

  /** Calls the method at `path`, which returns an async iterable (chat's generate). */
  stream(path: string, args: unknown[]): AsyncIterable<unknown> {
    const result = this.method(path)(...args);
    if (!isAsyncIterable(result)) throw new Error(`the model's method '${path}' does not stream`);
    return result;
  }

  private method(path: string): Bound {
    const method = this.table.get(path);
    if (!method) throw new Error(`the model has no method '${path}'`);
    return method;
  }
}

/** A kind's exposure of its model, checked against its interface `M`, ready for child.ts. */
export function serve<M, P extends { memoryBytes: number }>(exposure: Exposure<M, P>): Served {
  return new Served(exposure);
}

/**
 * Checks that the model a family's loader gave has the required methods of
 * its kind's interface `M` (`required`: checked against M by the compiler),
 * before the runner serves it as one.
 */
export function assertModel<M extends LoadedModel>(model: LoadedModel, what: string, required: ReadonlyArray<CallName<M> | StreamName<M>>): asserts model is M {
  const missing = required.filter((name) => typeof Reflect.get(model, name) !== 'function');
  if (missing.length) throw new Error(`the model loaded is not ${what}: it has no ${missing.join(', ')}`);
}
