import type { ModelKind } from '../../core/catalog.js';
import type { LoadedModel } from '../../core/loader.js';

/**
 * The types both ends of a runner are written against: the method names of
 * a task interface (core/tasks) and what each takes and gives back. A kind's
 * client (the server's side, kinds/<kind>.ts) calls a method by its name in
 * the interface, with that method's arguments; the kind's table in the same
 * file (the runner's side) maps the name to the loaded model's own method.
 * So a name, its arguments and its result are checked by the compiler on
 * both sides against one interface, and "go to definition" leads from a
 * client's method to the interface and from the table to the family.
 *
 * Crossing a process makes every method asynchronous: an interface's
 * methods return a promise (a call) or an async iterable (a stream, chat's
 * generate). `dispose` and the other LoadedModel basics stay with the
 * server (the runner process is what is disposed of).
 */

/** The kinds whose models run in runners (the streaming recognizers and sherpa voices run in sherpa-onnx's own supervised processes). */
export type RunnerKind = Extract<ModelKind, 'chat' | 'embedding' | 'rerank' | 'ocr' | 'asr' | 'tts' | 'image'>;

type Method = (...args: never[]) => unknown;

/** The keys of M that are its task's own (not LoadedModel's). */
type Own<M> = Exclude<keyof M, keyof LoadedModel>;

/** M's method `K`, required, whether M has it optionally or always. */
export type MethodOf<M, K extends keyof M> = Extract<NonNullable<M[K]>, Method>;

/** The names of M's methods that return a promise. */
export type CallName<M> = { [K in Own<M>]-?: NonNullable<M[K]> extends (...args: never[]) => Promise<unknown> ? K : never }[Own<M>] & string;

/** The names of M's methods that return an async iterable. */
export type StreamName<M> = { [K in Own<M>]-?: NonNullable<M[K]> extends (...args: never[]) => AsyncIterable<unknown> ? K : never }[Own<M>] & string;

/** What a call of M's method `K` resolves to. */
export type Result<M, K extends CallName<M>> = Awaited<ReturnType<MethodOf<M, K>>>;

/** What a stream of M's method `K` yields. */
export type Yielded<M, K extends StreamName<M>> = ReturnType<MethodOf<M, K>> extends AsyncIterable<infer T> ? T : never;

/** Whether M may lack `K` (an optional method: the runner reports whether the loaded model has it). */
type IsOptional<M, K extends keyof M> = undefined extends M[K] ? true : false;

/**
 * The runner's side of M: each method of M, named as in M and bound to the
 * loaded model's own (absent — undefined — where M makes it optional and the
 * model lacks it).
 */
export type MethodTable<M> = {
  [K in CallName<M> | StreamName<M>]: IsOptional<M, K> extends true ? MethodOf<M, K> | undefined : MethodOf<M, K>;
};

/**
 * A value off the channel, taken for the type its sender gave it. The one
 * point where the boundary trusts rather than checks: the value was written
 * by the other side's typed code for the same interface (a call's arguments
 * by a client, its result by the kind's table, a model's properties by the
 * runner's side of its kind), then copied by structured clone.
 */
export function asSent<T>(value: unknown): T {
  return value as T;
}
