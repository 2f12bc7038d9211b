import type { InstalledModel } from '../../core/store.js';
import type { RunnerKind } from './contract.js';
import type { WireError, WireLoadOptions } from './wire.js';

/**
 * Messages between the server process and a runner: one child process that
 * holds one loaded model (its native runtime: llama.cpp, ONNX Runtime) and
 * serves that model's task interface (core/tasks) over Node's IPC channel
 * with `serialization: 'advanced'` (V8's structured clone: typed arrays and
 * buffers cross as bytes, copied once into the message, never as JSON).
 *
 * A runner's life: `init` (import the family's loader; answered by `ready`
 * with the family's memory estimate), `load` (answered by `loaded` with the
 * model's properties and methods, or `failed`), then any number of `call`s,
 * then `dispose` (answered by `disposed`), after which the server closes the
 * channel and the runner exits. A runner handles messages in order.
 *
 * Calls are named by the server (`id`, a positive integer). A call's
 * arguments are structured-clone data in which functions became callback
 * references and AbortSignals signal references (wire.ts): the runner calls
 * back with `callback`, answered by `callback-result`; an abort on the
 * server's side is an `abort` message. A call ends with exactly one of
 * `return` or `throw`; a streamed call (an async iterable, chat's generate)
 * sends `yield` messages first.
 */

export type ToRunner =
  /** Import the loader of `loaderKey` (`${backend}:${kind}`) for this model; answered by `ready` or `failed`. */
  | { t: 'init'; loaderKey: string; installed: InstalledModel; home: string }
  /** Load the model, served as a model of `kind` (kinds/<kind>.ts: its task interface); answered by `loaded` or `failed`. */
  | { t: 'load'; options: WireLoadOptions; kind: RunnerKind }
  /** Call `path` (a method of the model, or of one of its parts: `vad.probabilities`). */
  | { t: 'call'; id: number; path: string; args: unknown[]; stream: boolean }
  /** The server aborted the signal of call `id` with `reason`. */
  | { t: 'abort'; id: number; reason: WireError }
  /** What the server's callback `seq` returned or threw. */
  | { t: 'callback-result'; seq: number; ok: true; value: unknown }
  | { t: 'callback-result'; seq: number; ok: false; error: WireError }
  /** Whether llama.cpp's persistent threadpool may spin between decodes (only chat decoding is running on the machine). */
  | { t: 'polling'; on: boolean }
  /** Dispose of the model; answered by `disposed`. */
  | { t: 'dispose' };

/**
 * The model is loaded: its properties (read once), the names of its
 * methods and parts (nested objects with methods of their own, as a
 * Transcriber's voice activity detector), and the values of its live
 * properties (sent again with `live` whenever they change).
 */
export interface Loaded {
  t: 'loaded';
  props: Record<string, unknown>;
  methods: string[];
  parts: Record<string, string[]>;
  live: Record<string, unknown>;
}

export type FromRunner =
  /** The family's loader is imported; `estimate`: the memory its model will take, when the family knows better than the file sizes. */
  | { t: 'ready'; estimate?: number }
  | Loaded
  /** `init` or `load` failed. */
  | { t: 'failed'; error: WireError }
  | { t: 'yield'; id: number; value: unknown }
  | { t: 'return'; id: number; value: unknown }
  | { t: 'throw'; id: number; error: WireError }
  /** Call `id` calls the server's callback `callback`; `seq` names this invocation for its result. */
  | { t: 'callback'; id: number; callback: number; seq: number; args: unknown[] }
  /** Live properties that changed (chat's queue depth). */
  | { t: 'live'; values: Record<string, unknown> }
  /** A line for the server's log (what the loader and the model report). */
  | { t: 'log'; message: string }
  | { t: 'disposed' };
