import type { LoadedModel, Loader, LoaderTable } from '../../core/loader.js';
import { PendingReplies } from '../../core/pending-replies.js';
import type { InstalledModel } from '../../core/store.js';
import { RUNNER_KINDS } from './kinds.js';
import type { FromRunner, ToRunner } from './protocol.js';
import type { Served } from './serving.js';
import { decodeArgs, fromWireError, toWireError } from './wire.js';

/**
 * The runner's side (see protocol.ts): one model, loaded through the
 * family's own loader and served as its kind's task interface (the
 * kind's `serve…` in kinds/<kind>.ts: a table of the interface's methods
 * bound to the model's), its methods called on the server's behalf. Every
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

export function serveRunner(hooks: RunnerHooks): void {
  let loader: Loader | undefined;
  let installed: InstalledModel | undefined;
  let model: LoadedModel | undefined;
  /** The model as its kind serves it: its properties, methods and parts. */
  let served: Served | undefined;
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
    if (!served?.hasLive) return;
    const changed: Record<string, unknown> = {};
    let any = false;
    for (const [name, value] of Object.entries(served.live())) {
      if (value !== live[name]) {
        changed[name] = value;
        live[name] = value;
        any = true;
      }
    }
    if (any) send({ t: 'live', values: changed });
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
      if (!served) throw new Error('call before load');
      const args = decodeArgs(wireArgs, callback, controller.signal);
      if (stream) {
        for await (const value of served.stream(path, args)) {
          send({ t: 'yield', id, value });
          sendLive();
        }
        send({ t: 'return', id, value: undefined });
      } else {
        send({ t: 'return', id, value: await served.call(path, args) });
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
          served = RUNNER_KINDS[message.kind].serve(model);
          live = served.live();
          send({ t: 'loaded', props: served.props, methods: served.methods, parts: served.parts, live: { ...live } });
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
        served = undefined;
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
