import { spawn, type ChildProcess } from 'node:child_process';
import { guarded } from '../../core/guard.js';
import { PushQueue } from '../../core/push-queue.js';
import { moduleArgv } from '../launch/module-entry.js';
import { asSent } from './contract.js';
import type { FromRunner, ToRunner } from './protocol.js';
import { encodeArgs, fromWireError, toWireError, type WireError } from './wire.js';

/**
 * One runner process, seen from the server: spawning it, the calls in
 * flight over its channel, and noticing its end. What its end means — an
 * error for the requests it held, a restart, a log line — is decided by its
 * owner (runners.ts) through `onExit`.
 */

/** The runner's entry (src/runner.ts, dist/runner.js), with the model's id after it: `ps` and /proc show which model a runner holds. */
function runnerArgv(model: string): string[] {
  return moduleArgv(new URL('../../runner.js', import.meta.url), [model]);
}

/** How a process ended, in words: "was killed (SIGKILL)", "crashed (SIGSEGV)", "exited with code 1". */
export function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal === 'SIGKILL' || signal === 'SIGTERM' || signal === 'SIGINT' || signal === 'SIGHUP') return `was killed (${signal})`;
  if (signal) return `crashed (${signal})`;
  return `exited with code ${code}`;
}

interface PendingCall {
  resolve(value: unknown): void;
  reject(error: Error): void;
  /** Yields of a streamed call. */
  stream?: PushQueue<unknown>;
  callbacks: Map<number, (...args: unknown[]) => unknown>;
  signal?: AbortSignal;
  onAbort?: () => void;
}

export interface RunnerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** We asked it to end (dispose, shutdown). */
  expected: boolean;
  /** Calls that were in flight (they were failed with `lostCall`). */
  lostCalls: number;
  /** Its last lines of output. */
  output: string[];
}

export interface RunnerProcessOptions {
  /** The model it holds (its id), for the command line. */
  model: string;
  log: (message: string) => void;
  /** The error a call in flight gets when the process dies. */
  lostCall: (how: string) => Error;
  onExit: (exit: RunnerExit) => void;
}

const OUTPUT_LINES = 20;
/** How long the output of a process that ended may take to arrive. */
const OUTPUT_DRAIN_MS = 500;
/** How long a runner may take to dispose of its model before it is killed. */
const DISPOSE_GRACE_MS = 5000;

export class RunnerProcess {
  private readonly child: ChildProcess;
  private readonly calls = new Map<number, PendingCall>();
  private readonly replies = new Map<string, { resolve(message: FromRunner): void; reject(error: Error): void }>();
  private readonly output: string[] = [];
  private nextCall = 1;
  private nextCallback = 1;
  private stopping = false;
  private exitedWith: RunnerExit | undefined;
  private readonly exited: Promise<void>;
  /** Live properties as the runner last reported them. */
  readonly live: Record<string, unknown> = {};

  constructor(private readonly options: RunnerProcessOptions) {
    this.child = spawn(process.execPath, runnerArgv(options.model), {
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'advanced',
      windowsHide: true,
    });
    // A fault in handling one message is a bug to log, not a reason to take the server down.
    const guard = <A extends unknown[]>(handler: (...args: A) => void) =>
      guarded(handler, (error) => options.log(`error in the runner supervisor of ${options.model}: ${(error as Error)?.stack ?? String(error)}`));
    const drained = [this.child.stdout!, this.child.stderr!].map((stream) => {
      stream.setEncoding('utf8');
      let partial = '';
      stream.on('data', guard((chunk: string) => {
        const lines = (partial + chunk).split('\n');
        partial = lines.pop()!;
        for (const line of lines) this.outputLine(line);
      }));
      return new Promise<void>((resolve) => stream.once('close', () => resolve()));
    });
    this.child.on('message', guard((message: FromRunner) => this.onMessage(message)));
    this.exited = new Promise((resolve) => {
      const ended = (code: number | null, signal: NodeJS.Signals | null) => {
        try {
          this.onClose(code, signal);
        } finally {
          resolve();
        }
      };
      this.child.on('error', guard((error: Error) => {
        this.outputLine(`the runner process could not be started: ${error.message}`);
        ended(null, null);
      }));
      // 'exit', then its last output (what it printed as it crashed) before anyone is told. Not
      // 'close': Node never emits it for a child whose IPC channel the parent disconnected.
      this.child.on('exit', guard((code: number | null, signal: NodeJS.Signals | null) => {
        const outputDrained = Promise.race([Promise.all(drained), new Promise((done) => setTimeout(done, OUTPUT_DRAIN_MS))]);
        void outputDrained.then(guard(() => ended(code, signal)));
      }));
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitedWith === undefined;
  }

  /** Sends a message answered by a message of type `answer` (or `failed`, which rejects); rejects if the process ends first. */
  request<A extends FromRunner['t']>(message: ToRunner, answer: A): Promise<Extract<FromRunner, { t: A }>> {
    return new Promise((resolve, reject) => {
      if (!this.alive) return reject(this.options.lostCall(this.how()));
      const isAnswer = (reply: FromRunner): reply is Extract<FromRunner, { t: A }> => reply.t === answer;
      const waiting = { resolve: (reply: FromRunner) => (isAnswer(reply) ? resolve(reply) : reject(new Error(`the runner answered '${reply.t}' to '${message.t}'`))), reject };
      this.replies.set(answer, waiting);
      this.replies.set('failed', waiting);
      this.send(message);
    });
  }

  send(message: ToRunner): void {
    if (!this.alive || !this.child.connected) return;
    try {
      this.child.send(message);
    } catch {
      // The channel closed under us: 'close' reports it.
    }
  }

  /**
   * Calls a method of the model; `signal` (found among the arguments) aborts it in the runner.
   * `T`: what the method resolves to, as the kind's client (kinds/) has it from the task interface.
   */
  call<T>(path: string, args: readonly unknown[]): Promise<T> {
    return new Promise<T>((resolve, reject) => this.start(path, args, { resolve: (value) => resolve(asSent<T>(value)), reject, callbacks: new Map() }, false));
  }

  /** Calls a method that returns an async iterable of `T`; breaking out of it aborts the call in the runner. */
  stream<T>(path: string, args: readonly unknown[]): AsyncIterable<T> {
    const self = this;
    return {
      async *[Symbol.asyncIterator]() {
        const stream = new PushQueue<unknown>();
        let done = false;
        const id = self.start(path, args, { resolve: () => stream.end(), reject: (error) => stream.fail(error), stream, callbacks: new Map() }, true);
        try {
          for await (const value of stream) yield asSent<T>(value);
          done = true;
        } finally {
          // The consumer stopped early (a client that left, a stop sequence found by the caller).
          if (!done && self.calls.has(id)) self.abort(id, new DOMException('The caller stopped reading.', 'AbortError'));
        }
      },
    };
  }

  /** Asks the runner to dispose of its model and exit; kills it if it takes too long. Resolves once the process is gone. */
  async dispose(): Promise<void> {
    if (!this.alive) return;
    this.stopping = true;
    const grace = setTimeout(() => this.kill(), DISPOSE_GRACE_MS);
    try {
      await Promise.race([this.request({ t: 'dispose' }, 'disposed').catch(() => undefined), this.exited]);
      if (this.child.connected) this.child.disconnect();
      await this.exited;
    } finally {
      clearTimeout(grace);
    }
  }

  /** Ends the process now, whatever it is doing (SIGKILL); its calls fail as lost. */
  kill(): void {
    if (!this.alive) return;
    this.stopping = true;
    this.child.kill('SIGKILL');
  }

  /** Resolves when the process has ended. */
  whenExited(): Promise<void> {
    return this.exited;
  }

  // ---- internals ----

  private start(path: string, args: readonly unknown[], pending: PendingCall, stream: boolean): number {
    const id = this.nextCall++;
    if (!this.alive) {
      pending.reject(this.options.lostCall(this.how()));
      return id;
    }
    let wire: unknown[];
    try {
      wire = encodeArgs(
        args,
        (fn) => {
          const reference = this.nextCallback++;
          pending.callbacks.set(reference, fn);
          return reference;
        },
        (signal) => {
          pending.signal = signal;
        },
      );
    } catch (error) {
      pending.reject(error as Error);
      return id;
    }
    const signal = pending.signal;
    if (signal?.aborted) {
      pending.reject(signal.reason as Error);
      return id;
    }
    this.calls.set(id, pending);
    if (signal) {
      pending.onAbort = () => this.abort(id, signal.reason);
      signal.addEventListener('abort', pending.onAbort, { once: true });
    }
    this.send({ t: 'call', id, path, args: wire, stream });
    return id;
  }

  private abort(id: number, reason: unknown): void {
    this.send({ t: 'abort', id, reason: toWireError(reason) });
  }

  private settle(id: number): PendingCall | undefined {
    const pending = this.calls.get(id);
    if (!pending) return undefined;
    this.calls.delete(id);
    if (pending.onAbort) pending.signal?.removeEventListener('abort', pending.onAbort);
    return pending;
  }

  /** The runner's error, or — once the caller's signal aborted — the signal's own reason, as an in-process call would reject. */
  private errorFor(pending: PendingCall, error: WireError): Error {
    return pending.signal?.aborted ? (pending.signal.reason as Error) : fromWireError(error);
  }

  private onMessage(message: FromRunner): void {
    switch (message.t) {
      case 'yield':
        this.calls.get(message.id)?.stream?.push(message.value);
        return;
      case 'return':
        this.settle(message.id)?.resolve(message.value);
        return;
      case 'throw': {
        const pending = this.settle(message.id);
        pending?.reject(this.errorFor(pending, message.error));
        return;
      }
      case 'callback':
        void this.runCallback(message.id, message.callback, message.seq, message.args);
        return;
      case 'live':
        Object.assign(this.live, message.values);
        return;
      case 'log':
        this.options.log(message.message);
        return;
      default: {
        const reply = this.replies.get(message.t);
        this.replies.clear();
        if (message.t === 'failed') reply?.reject(fromWireError(message.error));
        else reply?.resolve(message);
      }
    }
  }

  private async runCallback(id: number, reference: number, seq: number, args: unknown[]): Promise<void> {
    const fn = this.calls.get(id)?.callbacks.get(reference);
    try {
      if (!fn) throw new Error('the call that passed this function has ended');
      this.send({ t: 'callback-result', seq, ok: true, value: await fn(...args) });
    } catch (error) {
      this.send({ t: 'callback-result', seq, ok: false, error: toWireError(error) });
      // The caller's function failed (a sink whose client left): the call stops with its error, as it would in-process.
      if (this.calls.has(id)) this.abort(id, error);
    }
  }

  private outputLine(line: string): void {
    if (!line.trim()) return;
    this.output.push(line);
    if (this.output.length > OUTPUT_LINES) this.output.shift();
    this.options.log(`runner ${this.options.model}[${this.child.pid}]: ${line}`);
  }

  private how(): string {
    return this.exitedWith ? describeExit(this.exitedWith.code, this.exitedWith.signal) : 'is not running';
  }

  private onClose(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exitedWith) return;
    const lostCalls = this.calls.size;
    this.exitedWith = { code, signal, expected: this.stopping, lostCalls, output: [...this.output] };
    const lost = () => this.options.lostCall(describeExit(code, signal));
    for (const id of [...this.calls.keys()]) this.settle(id)!.reject(lost());
    for (const reply of new Set(this.replies.values())) reply.reject(lost());
    this.replies.clear();
    this.options.onExit(this.exitedWith);
  }
}
