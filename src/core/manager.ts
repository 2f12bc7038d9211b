import type { ModelKind } from './catalog.js';
import { JobQueue } from './job-queue.js';
import type { LoadedModel, Loader, LoadOptions } from './loader.js';
import { describeLoadFailure } from './load-failure.js';
import type { InstalledModel } from './store.js';

/**
 * Loads models on demand and keeps them while they are useful: a keep-alive
 * after last use, least-recently-used eviction under a memory budget and a
 * maximum count, never evicting a model that is serving a request, and one
 * load per model however many requests arrive for it at once.
 */

export interface ManagerOptions {
  /** Idle time before an unused model is unloaded; < 0 keeps models forever, 0 unloads at once. */
  keepAliveMs: number;
  maxMemoryBytes: number;
  maxLoaded: number;
  load: LoadOptions;
  log?: (message: string) => void;
  /** Called with the ids of the models that have requests on them, whenever that set changes. */
  onBusy?: (models: string[]) => void;
}

export interface Lease<M extends LoadedModel = LoadedModel> {
  readonly model: M;
  readonly installed: InstalledModel;
  /** Ends this use; the model then stays loaded for its keep-alive. */
  release(): void;
}

export interface LoadedInfo {
  id: string;
  kind: ModelKind;
  memoryBytes: number;
  /** Text models: tokens one conversation (or input) may hold, as loaded. */
  contextSize?: number;
  /** Leases held now: requests being served and those waiting in the model's line. */
  activeRequests: number;
  /** Of those, the requests waiting in the model's own line (a free chat sequence, a turn of the job queue). */
  queued: number;
  /** The runner process that holds it; undefined when it runs in this process. */
  pid?: number;
  /** When the load finished (ms since epoch). */
  loadedAt: number;
  lastUsed: number;
  /** When it will be unloaded if unused (ms since epoch), or null while busy/kept forever. */
  expiresAt: number | null;
}

interface Slot {
  id: string;
  installed: InstalledModel;
  ready: Promise<LoadedModel>;
  model?: LoadedModel;
  estimate: number;
  refs: number;
  lastUsed: number;
  loadedAt: number;
  keepAliveMs: number;
  timer?: NodeJS.Timeout;
  expiresAt: number | null;
}

export class ModelManager {
  private readonly slots = new Map<string, Slot>();
  private closed = false;

  constructor(
    private readonly options: ManagerOptions,
    private readonly loaderFor: (model: InstalledModel) => Promise<Loader>,
  ) {}

  async acquire<M extends LoadedModel>(installed: InstalledModel, keepAliveMs?: number): Promise<Lease<M>> {
    if (this.closed) throw new Error('the model manager is shut down');
    let slot = this.slots.get(installed.id);
    if (!slot) {
      slot = await this.startLoad(installed);
    }
    slot.refs++;
    if (slot.refs === 1) this.busyChanged();
    this.clearTimer(slot);
    if (keepAliveMs !== undefined) slot.keepAliveMs = keepAliveMs;
    let model: LoadedModel;
    try {
      model = await slot.ready;
    } catch (error) {
      slot.refs--;
      if (slot.refs === 0) this.busyChanged();
      throw error;
    }
    const held = slot;
    let released = false;
    return {
      model: model as M,
      installed,
      release: () => {
        if (released) return;
        released = true;
        this.release(held);
      },
    };
  }

  private async startLoad(installed: InstalledModel): Promise<Slot> {
    const loader = await this.loaderFor(installed);
    // Another request may have started the same load while the loader module was imported.
    const existing = this.slots.get(installed.id);
    if (existing) return existing;
    const estimate = loader.estimateMemory?.(installed) ?? installed.sizeBytes;
    const slot: Slot = {
      id: installed.id,
      installed,
      estimate,
      refs: 0,
      lastUsed: Date.now(),
      loadedAt: 0,
      keepAliveMs: this.options.keepAliveMs,
      expiresAt: null,
      ready: Promise.resolve(undefined as unknown as LoadedModel),
    };
    this.slots.set(installed.id, slot);
    const evicted = this.makeRoom(slot);
    slot.ready = (async () => {
      await evicted;
      this.options.log?.(`loading ${installed.id}`);
      const options: LoadOptions = {
        ...this.options.load,
        memoryBudgetBytes: this.options.maxMemoryBytes,
        log: this.options.log,
        reserve: async (bytes) => {
          slot.estimate = bytes;
          await this.makeRoom(slot);
        },
        onLost: () => this.forget(slot),
      };
      const model = await loader.load(installed, options).catch(async (error: unknown) => {
        // Logged here, once per failed load, however many requests waited on it; the next request tries again.
        const failure = await describeLoadFailure(installed, error);
        const detail = error instanceof Error && error !== failure ? ` (${error.stack ?? error.message})` : '';
        this.options.log?.(`failed to load ${installed.id}: ${failure.message}${detail}`);
        throw failure;
      });
      slot.model = model;
      slot.loadedAt = Date.now();
      slot.estimate = model.memoryBytes || estimate;
      return model;
    })();
    slot.ready.catch(() => {
      if (this.slots.get(slot.id) === slot) this.slots.delete(slot.id);
    });
    return slot;
  }

  /** Unloads idle models, least recently used first, until `incoming` fits. */
  private async makeRoom(incoming: Slot): Promise<void> {
    const unloads: Promise<void>[] = [];
    const others = () => [...this.slots.values()].filter((s) => s !== incoming);
    const used = () => others().reduce((sum, s) => sum + s.estimate, 0);
    while (others().length > 0 && (used() + incoming.estimate > this.options.maxMemoryBytes || others().length + 1 > this.options.maxLoaded)) {
      const idle = others()
        .filter((s) => s.refs === 0 && s.model)
        .sort((a, b) => a.lastUsed - b.lastUsed)[0];
      if (!idle) break; // everything else is busy or loading: never evict those
      this.options.log?.(`evicting ${idle.id} to make room for ${incoming.id}`);
      unloads.push(this.unloadSlot(idle));
    }
    await Promise.all(unloads);
  }

  /**
   * Unloads idle models, least recently used first, while more are loaded
   * than the limits allow: a load that found every other model busy went over
   * them, and the models it could not evict then are idle now.
   */
  private trim(): void {
    const loaded = () => [...this.slots.values()];
    // One model alone over the memory budget stays: it was loaded anyway, as the only one.
    const over = () => loaded().length > this.options.maxLoaded || (loaded().length > 1 && loaded().reduce((sum, s) => sum + s.estimate, 0) > this.options.maxMemoryBytes);
    while (over()) {
      const idle = loaded()
        .filter((s) => s.refs === 0 && s.model)
        .sort((a, b) => a.lastUsed - b.lastUsed)[0];
      if (!idle) return;
      this.options.log?.(`unloading ${idle.id}: more models are loaded than --max-loaded or --max-memory allow`);
      void this.unloadSlot(idle);
    }
  }

  private release(slot: Slot): void {
    slot.refs--;
    slot.lastUsed = Date.now();
    // A model's memory may change while it serves (a chat model's context grown for a longer conversation).
    if (slot.model?.memoryBytes) slot.estimate = slot.model.memoryBytes;
    if (slot.refs === 0) this.busyChanged();
    if (slot.refs > 0 || this.slots.get(slot.id) !== slot) return;
    this.trim();
    if (this.slots.get(slot.id) !== slot) return;
    if (slot.keepAliveMs === 0) {
      void this.unloadSlot(slot);
    } else if (slot.keepAliveMs > 0) {
      slot.expiresAt = slot.lastUsed + slot.keepAliveMs;
      slot.timer = setTimeout(() => {
        if (slot.refs === 0) void this.unloadSlot(slot);
      }, slot.keepAliveMs);
      slot.timer.unref();
    }
  }

  private clearTimer(slot: Slot): void {
    if (slot.timer) clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.expiresAt = null;
  }

  private async unloadSlot(slot: Slot): Promise<void> {
    this.clearTimer(slot);
    if (this.slots.get(slot.id) === slot) this.slots.delete(slot.id);
    try {
      const model = await slot.ready;
      await model.dispose();
      this.options.log?.(`unloaded ${slot.id}`);
    } catch {
      // a failed load has nothing to dispose
    }
  }

  /** A model that went away by itself (its runner process died): dropped without an unload; the next request loads it again. */
  private forget(slot: Slot): void {
    this.clearTimer(slot);
    if (this.slots.get(slot.id) === slot) this.slots.delete(slot.id);
  }

  private busyChanged(): void {
    this.options.onBusy?.([...this.slots.values()].filter((s) => s.refs > 0).map((s) => s.id));
  }

  /** Unloads a model now if it is idle; returns whether it was unloaded. */
  async unload(id: string): Promise<boolean> {
    const slot = this.slots.get(id);
    if (!slot || slot.refs > 0) return false;
    await this.unloadSlot(slot);
    return true;
  }

  loaded(): LoadedInfo[] {
    return [...this.slots.values()]
      .filter((s) => s.model)
      .map((s) => ({
        id: s.id,
        kind: s.installed.entry.kind,
        memoryBytes: s.estimate,
        ...(s.model!.contextSize ? { contextSize: s.model!.contextSize } : {}),
        activeRequests: s.refs,
        queued: queueDepth(s.model!),
        pid: s.model!.pid,
        loadedAt: s.loadedAt,
        lastUsed: s.lastUsed,
        expiresAt: s.expiresAt,
      }));
  }

  /** Unloads everything (shutdown). In-flight users should have been cancelled first. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.slots.values()].map((s) => this.unloadSlot(s)));
  }
}

/** Requests waiting in a loaded model's own line: its `queued`, or the length of the job queue it runs its work through. */
function queueDepth(model: LoadedModel): number {
  if (typeof model.queued === 'number') return model.queued;
  const queue = (model as { queue?: unknown }).queue;
  return queue instanceof JobQueue ? queue.length : 0;
}
