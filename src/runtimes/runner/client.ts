import type { LoadedModel } from '../../core/loader.js';
import { asSent, type CallName, type MethodOf, type Result, type StreamName, type Yielded } from './contract.js';
import type { RunnerProcess } from './process.js';
import type { Loaded } from './protocol.js';

/**
 * The server's side of a model in a runner: the base of every kind's client
 * (kinds/<kind>.ts), which implements the kind's task interface with named
 * methods, each a call over the runner's channel.
 */

/** The server-side line of a kind whose jobs take turns (`--max-queue`, then 503): how many may wait, and the model's id for the message. */
export interface ClientQueue {
  maxWaiting: number;
  model: string;
}

/** The methods of M in a runner, called by their names in M, with M's arguments, resolving to M's results. */
export class Remote<M> {
  private readonly methods: ReadonlySet<string>;

  /** `part`: the name of a part of the model (a Transcriber's `vad`) whose methods these are. */
  constructor(
    private readonly runner: RunnerProcess,
    loaded: Loaded,
    private readonly part?: string,
  ) {
    this.methods = new Set(part === undefined ? loaded.methods : (loaded.parts[part] ?? []));
  }

  /** Whether the loaded model has method `name` (one its interface makes optional, as chat's prefill). */
  has(name: CallName<M> | StreamName<M>): boolean {
    return this.methods.has(name);
  }

  call<K extends CallName<M>>(name: K, ...args: Parameters<MethodOf<M, K>>): Promise<Result<M, K>> {
    return this.runner.call<Result<M, K>>(this.path(name), args);
  }

  stream<K extends StreamName<M>>(name: K, ...args: Parameters<MethodOf<M, K>>): AsyncIterable<Yielded<M, K>> {
    return this.runner.stream<Yielded<M, K>>(this.path(name), args);
  }

  /** A method's path in a `call` message (protocol.ts): `generate`, or for a part's method `vad.probabilities`. */
  private path(name: string): string {
    return this.part === undefined ? name : `${this.part}.${name}`;
  }
}

/**
 * What every client is: the model's properties as the runner read them
 * after the load (`P`, written by the kind's runner side), its process, and
 * its end (unloading a model ends its runner, so its memory goes back to
 * the system).
 */
export abstract class RunnerClient<M extends LoadedModel, P extends { memoryBytes: number }> implements LoadedModel {
  protected readonly remote: Remote<M>;
  protected readonly props: P;

  constructor(
    protected readonly runner: RunnerProcess,
    loaded: Loaded,
  ) {
    this.remote = new Remote<M>(runner, loaded);
    this.props = asSent<P>(loaded.props);
    Object.assign(runner.live, loaded.live);
  }

  get memoryBytes(): number {
    return this.props.memoryBytes;
  }

  /** The runner process that holds the model (/v1/ps, and a test that kills it). */
  get pid(): number | undefined {
    return this.runner.pid;
  }

  dispose(): Promise<void> {
    return this.runner.dispose();
  }
}
