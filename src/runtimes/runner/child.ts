import type { LoadedModel, Loader, LoaderTable } from '../../core/loader.js';
import { PendingReplies } from '../../core/pending-replies.js';
import type { InstalledModel } from '../../core/store.js';
import type { FromRunner, ToRunner } from './protocol.js';
import type { Surface } from './surfaces.js';
import { decodeArgs, fromWireError, toWireError } from './wire.js';

/**
 * The runner's side (see protocol.ts): one model, loaded through the
 * family's own loader, its methods called on the server's behalf. Every
 * policy — queues, leases, limits, restarts, what a client is told — stays
 * in the server; a runner only runs the model. It exits when the server
 * closes the channel (or goes away), so it never outlives its server.
 */

export interface RunnerHooks {
  /** The loader table of this build (the composition root's). */
  loaders: LoaderTable;
  /** Before the loader is imported: the lserve home (where the llama.cpp binaries live), for what must be settled before any runtime starts. */
  init?(home: string): Promise<void>;
  /** Whether llama.cpp's threadpools may spin between decodes. */
  polling?(on: boolean): void;
}

interface Call {
  controller: AbortController;
}

type Method = (...args: unknown[]) => unknown;

export function serveRunner(hooks: RunnerHooks): void {
  let loader: Loader | undefined;
  let installed: InstalledModel | undefined;
  let model: LoadedModel | undefined;
  let surface: Surface = {};
  let live: Record<string, unknown> = {};
  const calls = new Map<number, Call>();
  /** The server's callbacks called from here, by `seq`, waiting for what they return. */
  const callbacks = new PendingReplies<unknown>();

  const send = (message: FromRunner): void => {
    if (process.connected) process.send!(message);
  };
  const log = (message: string) => send({ t: 'log', message });

  /** Live properties that changed since they were last sent. */
  const sendLive = (): void => {
    if (!model || !surface.live?.length) return;
    const changed: Record<string, unknown> = {};
    let any = false;
    for (const name of surface.live) {
      const value = (model as unknown as Record<string, unknown>)[name];
      if (value !== live[name]) {
        changed[name] = value;
        live[name] = value;
        any = true;
      }
    }
    if (any) send({ t: 'live', values: changed });
  };

  const methodAt = (path: string): { target: object; method: Method } => {
    const [first, second] = path.split('.');
    const owner = (second === undefined ? model : (model as unknown as Record<string, unknown>)[first!]) as Record<string, unknown> | undefined;
    const method = owner?.[second ?? first!];
    if (!owner || typeof method !== 'function') throw new Error(`the model has no method '${path}'`);
    return { target: owner, method: method as Method };
  };

  const call = async (id: number, path: string, wireArgs: unknown[], stream: boolean): Promise<void> => {
    const controller = new AbortController();
    calls.set(id, { controller });
    const callback = (reference: number) => (...args: unknown[]) => {
      const { id: seq, promise: result } = callbacks.add();
      // A sink the model does not await (an audio block) must not become an unhandled rejection.
      result.catch(() => {});
      send({ t: 'callback', id, callback: reference, seq, args });
      return result;
    };
    try {
      const { target, method } = methodAt(path);
      const args = decodeArgs(wireArgs, callback, controller.signal);
      if (stream) {
        for await (const value of method.apply(target, args) as AsyncIterable<unknown>) {
          send({ t: 'yield', id, value });
          sendLive();
        }
        send({ t: 'return', id, value: undefined });
      } else {
        send({ t: 'return', id, value: await method.apply(target, args) });
      }
    } catch (error) {
      send({ t: 'throw', id, error: toWireError(error) });
    } finally {
      calls.delete(id);
      sendLive();
    }
  };

  const handle = async (message: ToRunner): Promise<void> => {
    switch (message.t) {
      case 'init': {
        try {
          await hooks.init?.(message.home);
          const load = hooks.loaders[message.loaderKey];
          if (!load) throw new Error(`this build has no runtime for ${message.loaderKey} models`);
          installed = message.installed;
          loader = await load();
          send({ t: 'ready', estimate: loader.estimateMemory?.(installed) });
        } catch (error) {
          send({ t: 'failed', error: toWireError(error) });
        }
        return;
      }
      case 'load': {
        try {
          if (!loader || !installed) throw new Error('load before init');
          model = await loader.load(installed, { ...message.options, log });
          surface = message.surface;
          const record = model as unknown as Record<string, unknown>;
          const props = Object.fromEntries([...(surface.props ?? []), 'memoryBytes'].map((name) => [name, record[name]]));
          const methods = [...(surface.calls ?? []), ...(surface.streams ?? [])].filter((name) => typeof record[name] === 'function');
          const parts: Record<string, string[]> = {};
          for (const [part, names] of Object.entries(surface.parts ?? {})) {
            const value = record[part] as Record<string, unknown> | undefined | null;
            if (value) parts[part] = names.filter((name) => typeof value[name] === 'function');
          }
          live = Object.fromEntries((surface.live ?? []).map((name) => [name, record[name]]));
          send({ t: 'loaded', props, methods, parts, live });
        } catch (error) {
          send({ t: 'failed', error: toWireError(error) });
        }
        return;
      }
      case 'call':
        void call(message.id, message.path, message.args, message.stream);
        return;
      case 'abort':
        calls.get(message.id)?.controller.abort(fromWireError(message.reason));
        return;
      case 'callback-result':
        if (message.ok) callbacks.settle(message.seq, message.value);
        else callbacks.fail(message.seq, fromWireError(message.error));
        return;
      case 'polling':
        hooks.polling?.(message.on);
        return;
      case 'dispose': {
        const current = model;
        model = undefined;
        try {
          await current?.dispose();
        } finally {
          send({ t: 'disposed' });
        }
        return;
      }
    }
  };

  // The server closed the channel (unload, shutdown) or is gone: nothing is left to serve.
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: ToRunner) => {
    void handle(message);
  });
}
