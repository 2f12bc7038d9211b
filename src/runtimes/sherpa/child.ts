import { createRequire } from 'node:module';
import type { LifecycleChildMessage, LifecycleParentMessage, SherpaProtocol } from './protocol.js';
import type { SherpaOnnx } from './sherpa-onnx.js';

/**
 * What every sherpa-onnx child process does around its service
 * (recognizer-child.ts, synthesizer-child.ts; the server's side is
 * process.ts): load sherpa-onnx-node from LSERVE_SHERPA_MODULE (or report
 * `fatal` and exit), exit when the server closes the IPC channel, speak the
 * lifecycle part of the protocol (`load` answered by `loaded`, `unload`, then
 * a collection) over the service's models by key, hand every other message
 * to the service, and say `ready`. Services stay small: they only drive
 * sherpa-onnx; every policy (limits, restarts, errors to users) lives in the
 * server's process.
 *
 * Protocol: see protocol.ts.
 */

/** The service's own messages from the server (all but `load` and `unload`). */
export type ServiceRequest<P extends SherpaProtocol> = Exclude<P['parent'], LifecycleParentMessage<unknown>>;

/** A service's side of a child. */
export interface ChildService<P extends SherpaProtocol, Model> {
  /**
   * `load`: a model from its config (throwing if sherpa-onnx refuses it). A
   * model that loads in the background gives `ready`, which settles with
   * what `loaded` reports (or the failure); the model is kept meanwhile, so
   * requests for it can wait on it.
   */
  create(config: P['config']): { model: Model; ready?: Promise<P['info']> };
  /** `unload`: forget the work of a model that was dropped. */
  dropped?(key: string, model: Model): void;
  /** The service's own messages. */
  handle(message: ServiceRequest<P>): void;
  /** `handle` threw for `message`: report it to the server. */
  failed(message: ServiceRequest<P>, error: unknown): void;
}

/** Sends a message to the server; dropped once the channel is closed. */
export type Send<P extends SherpaProtocol> = (message: P['child']) => void;

/** An error's message, as children report it. */
export function messageOf(error: unknown): string {
  return String((error as { message?: unknown } | null | undefined)?.message || error);
}

/** A loaded model by key; throws for one this process does not hold (`failed` then reports it for the request). */
export type ModelFor<Model> = (key: string) => Model;

/**
 * Runs this process as a sherpa-onnx child: `start` builds the service once
 * sherpa-onnx-node is loaded, given `send` and the lookup of its loaded
 * models. `what` names the process in errors ("recognizer").
 */
export function serveSherpaChild<P extends SherpaProtocol, Model>(
  what: string,
  start: (sherpa: SherpaOnnx, send: Send<P>, modelFor: ModelFor<Model>) => ChildService<P, Model>,
): void {
  const channel = process.send?.bind(process);
  if (!channel) throw new Error('a sherpa-onnx child process is started by the server, with an IPC channel');
  let sherpa: SherpaOnnx;
  try {
    sherpa = createRequire(import.meta.url)(process.env.LSERVE_SHERPA_MODULE!) as SherpaOnnx;
  } catch (error) {
    channel({ t: 'fatal', error: messageOf(error) } satisfies LifecycleChildMessage<never>, () => process.exit(1));
    return;
  }
  const send = (message: P['child'] | LifecycleChildMessage<P['info']>) => {
    if (process.connected) channel(message);
  };
  process.on('disconnect', () => process.exit(0));
  const models = new Map<string, Model>();
  const modelFor = (key: string): Model => {
    const model = models.get(key);
    if (model === undefined) throw new Error(`the model is not loaded in the ${what} process`);
    return model;
  };
  const service = start(sherpa, send, modelFor);

  function load(key: string, config: P['config']): void {
    let created: ReturnType<typeof service.create>;
    try {
      created = service.create(config);
    } catch (error) {
      send({ t: 'loaded', key, ok: false, error: messageOf(error) });
      return;
    }
    const { model, ready } = created;
    models.set(key, model);
    if (!ready) {
      send({ t: 'loaded', key, ok: true });
      return;
    }
    ready.then(
      (info) => send({ t: 'loaded', key, ok: true, info }),
      (error: unknown) => {
        if (models.get(key) === model) models.delete(key);
        send({ t: 'loaded', key, ok: false, error: messageOf(error) });
      },
    );
  }

  function unload(key: string): void {
    const model = models.get(key);
    models.delete(key);
    if (model !== undefined) service.dropped?.(key, model);
    // With --expose-gc (process.ts), what the model's JavaScript side held goes now.
    if (typeof globalThis.gc === 'function') setImmediate(() => globalThis.gc?.());
  }

  process.on('message', (message: P['parent']) => {
    const lifecycle = message as LifecycleParentMessage<P['config']>;
    if (lifecycle.t === 'load') return load(lifecycle.key, lifecycle.config);
    if (lifecycle.t === 'unload') return unload(lifecycle.key);
    const request = message as ServiceRequest<P>;
    try {
      service.handle(request);
    } catch (error) {
      service.failed(request, error);
    }
  });
  send({ t: 'ready', version: String(sherpa.version || '') });
}
