import { describe, expect, it } from 'vitest';
import { ModelManager, type ManagerOptions } from '../../src/core/manager.js';
import type { Loader, LoadedModel } from '../../src/core/loader.js';
import type { InstalledModel } from '../../src/core/store.js';
import { InsufficientMemoryError, ModelLoadError } from '../../src/core/errors.js';

/** A backend that records every load and dispose, with a controllable load delay. */
class RecordingLoader implements Loader {
  readonly events: string[] = [];
  loadDelayMs = 0;
  failNext = false;

  async load(model: InstalledModel): Promise<LoadedModel> {
    this.events.push(`load ${model.id}`);
    await new Promise((r) => setTimeout(r, this.loadDelayMs));
    if (this.failNext) {
      this.failNext = false;
      throw new Error(`cannot load ${model.id}`);
    }
    return {
      memoryBytes: model.sizeBytes,
      dispose: async () => {
        this.events.push(`dispose ${model.id}`);
      },
    };
  }
}

function model(id: string, sizeBytes = 100): InstalledModel {
  return {
    id,
    sizeBytes,
    source: 'local',
    files: {},
    entry: { id, kind: 'chat', backend: 'test', description: id, aliases: [], owned_by: 'test', license: 'mit', files: {}, defaults: {} },
  };
}

function manager(loader: RecordingLoader, options: Partial<ManagerOptions> = {}): ModelManager {
  return new ModelManager({ keepAliveMs: 60_000, maxMemoryBytes: 1000, maxLoaded: 10, load: { threads: 0 }, ...options }, async () => loader);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('ModelManager', () => {
  it('loads once for concurrent first requests', async () => {
    const loader = new RecordingLoader();
    loader.loadDelayMs = 30;
    const m = manager(loader);
    const leases = await Promise.all(Array.from({ length: 5 }, () => m.acquire(model('a'))));
    expect(loader.events).toEqual(['load a']);
    expect(new Set(leases.map((l) => l.model)).size).toBe(1);
    expect(m.loaded()[0]).toMatchObject({ id: 'a', activeRequests: 5 });
    leases.forEach((l) => l.release());
    expect(m.loaded()[0]!.activeRequests).toBe(0);
    await m.close();
  });

  it('unloads an idle model when its keep-alive expires, and not while it is in use', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader, { keepAliveMs: 40 });
    const lease = await m.acquire(model('a'));
    await sleep(80);
    expect(loader.events).toEqual(['load a']); // busy: no expiry
    lease.release();
    expect(m.loaded()[0]!.expiresAt).toBeGreaterThan(Date.now());
    await sleep(100);
    expect(loader.events).toEqual(['load a', 'dispose a']);
    expect(m.loaded()).toEqual([]);
  });

  it('honours a per-request keep-alive (0 unloads at once, -1 keeps forever)', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader, { keepAliveMs: 20 });
    (await m.acquire(model('now'), 0)).release();
    await sleep(5);
    expect(loader.events).toEqual(['load now', 'dispose now']);
    (await m.acquire(model('forever'), -1)).release();
    await sleep(60);
    expect(m.loaded().map((x) => x.id)).toEqual(['forever']);
    await m.close();
  });

  it('evicts the least recently used idle model to stay under the memory budget', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader, { maxMemoryBytes: 250 });
    (await m.acquire(model('a'))).release();
    await sleep(2);
    (await m.acquire(model('b'))).release();
    await sleep(2);
    (await m.acquire(model('a'))).release(); // a is now more recent than b
    await m.acquire(model('c'));
    expect(loader.events).toEqual(['load a', 'load b', 'dispose b', 'load c']);
    expect(m.loaded().map((x) => x.id).sort()).toEqual(['a', 'c']);
    await m.close();
  });

  it('evicts to respect max-loaded', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader, { maxLoaded: 1 });
    (await m.acquire(model('a'))).release();
    (await m.acquire(model('b'))).release();
    expect(loader.events).toEqual(['load a', 'dispose a', 'load b']);
    await m.close();
  });

  it('never evicts a model that is serving a request', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader, { maxMemoryBytes: 150, maxLoaded: 1 });
    const busy = await m.acquire(model('a'));
    const other = await m.acquire(model('b'));
    expect(loader.events).toEqual(['load a', 'load b']);
    expect(m.loaded().map((x) => x.id).sort()).toEqual(['a', 'b']);
    busy.release();
    other.release();
    await m.close();
    expect(loader.events.slice(2).sort()).toEqual(['dispose a', 'dispose b']);
  });

  it('unloads what a load could not evict once it is idle, so the limits hold again', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader, { maxLoaded: 2 });
    const a = await m.acquire(model('a'));
    const b = await m.acquire(model('b'));
    const c = await m.acquire(model('c')); // a and b are busy: three loaded for now
    expect(m.loaded()).toHaveLength(3);
    a.release(); // the limit holds again without a
    await sleep(1);
    expect(loader.events).toEqual(['load a', 'load b', 'load c', 'dispose a']);
    b.release(); // two loaded, none over
    c.release();
    await sleep(1);
    expect(m.loaded().map((x) => x.id).sort()).toEqual(['b', 'c']);
    await m.close();
  });

  it('forgets a model that went away by itself (its runner died), and loads it again on the next request', async () => {
    const loader = new RecordingLoader();
    let lost: (() => void) | undefined;
    const m = new ModelManager({ keepAliveMs: 60_000, maxMemoryBytes: 1000, maxLoaded: 10, load: { threads: 0 } }, async () => ({
      load: async (installed, options) => {
        lost = options.onLost;
        return loader.load(installed);
      },
    }));
    const lease = await m.acquire(model('a'));
    lost!();
    expect(m.loaded()).toEqual([]);
    lease.release(); // a lease of the lost model ends without trouble
    (await m.acquire(model('a'))).release();
    expect(loader.events).toEqual(['load a', 'load a']);
    await m.close();
  });

  it('reports which models have requests on them as that changes', async () => {
    const loader = new RecordingLoader();
    const busy: string[][] = [];
    const m = manager(loader, { onBusy: (models) => busy.push([...models].sort()) });
    const a = await m.acquire(model('a'));
    const b = await m.acquire(model('b'));
    a.release();
    b.release();
    expect(busy).toEqual([['a'], ['a', 'b'], ['b'], []]);
    await m.close();
  });

  it('forgets a failed load so the next request retries', async () => {
    const loader = new RecordingLoader();
    loader.failNext = true;
    const m = manager(loader);
    await expect(m.acquire(model('a'))).rejects.toThrow('cannot load a');
    expect(m.loaded()).toEqual([]);
    const lease = await m.acquire(model('a'));
    expect(loader.events).toEqual(['load a', 'load a']);
    lease.release();
    await m.close();
  });

  it('maps a failed load, whatever the runtime, to model_load_failed naming the model and its file, logged once for all waiting requests', async () => {
    const loader = new RecordingLoader();
    loader.loadDelayMs = 20;
    loader.failNext = true;
    const logs: string[] = [];
    const m = manager(loader, { log: (line) => logs.push(line) });
    const broken = { ...model('a'), files: { model: '/nonexistent/a.onnx' } };
    const results = await Promise.allSettled([m.acquire(broken), m.acquire(broken), m.acquire(broken)]);
    for (const result of results) {
      expect(result.status).toBe('rejected');
      const error = (result as PromiseRejectedResult).reason as ModelLoadError;
      expect(error).toBeInstanceOf(ModelLoadError);
      expect(error).toMatchObject({ status: 500, code: 'model_load_failed' });
      expect(error.message).toBe("Model 'a' could not be loaded: cannot load a. Its file /nonexistent/a.onnx is missing. Check the file, or register another.");
    }
    expect(logs.filter((line) => line.startsWith('failed to load a:'))).toHaveLength(1);
    await m.close();
  });

  it('passes its memory budget to the loader and keeps typed load errors as they are', async () => {
    const seen: number[] = [];
    const typed = new InsufficientMemoryError('too big');
    const m = new ModelManager({ keepAliveMs: 60_000, maxMemoryBytes: 1234, maxLoaded: 10, load: { threads: 0 } }, async () => ({
      load: async (_model, options) => {
        seen.push(options.memoryBudgetBytes!);
        throw typed;
      },
    }));
    await expect(m.acquire(model('a'))).rejects.toBe(typed);
    expect(seen).toEqual([1234]);
    await m.close();
  });

  it('release is idempotent', async () => {
    const loader = new RecordingLoader();
    const m = manager(loader);
    const a = await m.acquire(model('a'));
    const b = await m.acquire(model('a'));
    a.release();
    a.release();
    expect(m.loaded()[0]!.activeRequests).toBe(1);
    b.release();
    await m.close();
  });
});
