import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Catalog, DEFAULT_CATALOG_PATH, isBundled, MODEL_KINDS, type ModelKind } from './catalog.js';
import { InvalidRequestError, ModelNotFoundError, OverloadedError, ServerError, UnsupportedError } from './errors.js';
import { EngineEvents, type EngineEvent } from './events.js';
import { ModelManager, type Lease } from './manager.js';
import { ModelStore, defaultHome, type InstalledModel } from './store.js';
import { loaderKey, type ContextSizes, type KvCacheType, type LoadedModel, type LoaderTable, type PreparerTable } from './loader.js';
import type { VoiceActivityDetector } from './voice-activity.js';
import { aliasTable, isLatentDecoderModel, KIND_NAMES, NO_CHOICES, noModelOfKind, pickDefault, preferInt8, vendorName, type DefaultPick, type ModelChoices } from './model-choice.js';

/**
 * The one engine instance that `serve` and every CLI command create and pass
 * down: catalog + store + model manager. Tasks (core/tasks/*) take it as
 * their first argument; nothing reaches it through a global.
 */

export interface EngineOptions {
  home: string;
  catalogPath: string;
  keepAliveMs: number;
  maxMemoryBytes: number;
  maxLoaded: number;
  threads: number;
  /** Concurrent sequences per chat model. */
  parallel: number;
  /** Requests allowed to wait for a busy model before 503. */
  maxQueue: number;
  /** Context sizes the user asked for (`--ctx-size`). */
  contextSizes: ContextSizes;
  /** Host memory per chat model for conversations its sequences give up (`--cache-ram`); undefined: the loader's default. */
  cacheRamBytes?: number;
  /** The KV cache type of chat models (`--kv-cache-type`); undefined: f16, or q8_0 where memory is short. */
  kvCacheType?: KvCacheType;
  /** The operator's default per kind and aliases (`--default-model`, `--alias`, `--alias-vendor-chat`): core/model-choice.ts. */
  models: ModelChoices;
  loaders: LoaderTable;
  /** Install-time work per `${backend}:${kind}` (`lserve pull`); from the composition root too. */
  preparers: PreparerTable;
  /** The child processes models run in, when the composition root runs them out of the server's process. */
  processes?: ModelProcesses;
  /** Loads the live voice activity detector (the realtime API's turn taking); from the composition root. */
  voiceActivity?: () => Promise<VoiceActivityDetector>;
  log: (message: string) => void;
}

/** The processes that hold loaded models (runners): what the engine tells them, and how it ends them. */
export interface ModelProcesses {
  /** The models with requests on them, whenever that set changes. */
  setBusy(models: string[]): void;
  /** Ends every one now (SIGKILL), whatever it is doing. */
  killAll(): void;
}

export function defaultEngineOptions(): EngineOptions {
  return {
    home: defaultHome(),
    // LSERVE_CATALOG points every command (and the server) at another models.json: mirrors, tests.
    catalogPath: process.env.LSERVE_CATALOG || fileURLToPath(DEFAULT_CATALOG_PATH),
    keepAliveMs: 5 * 60_000,
    maxMemoryBytes: Math.floor(os.totalmem() * 0.6),
    maxLoaded: 3,
    threads: 0,
    parallel: 4,
    maxQueue: 64,
    contextSizes: { models: {} },
    models: NO_CHOICES,
    // The composition root (src/compose.ts) hands the engine this build's loaders.
    loaders: {},
    preparers: {},
    log: () => {},
  };
}

export class Engine {
  readonly catalog: Catalog;
  readonly store: ModelStore;
  readonly manager: ModelManager;
  readonly options: EngineOptions;
  /** What tasks and runtimes report as they work (the server's /metrics listens). */
  readonly events: EngineEvents;
  private detector: Promise<VoiceActivityDetector> | undefined;

  constructor(options: Partial<EngineOptions> = {}) {
    this.options = { ...defaultEngineOptions(), ...options };
    this.events = new EngineEvents(this.options.log);
    this.catalog = Catalog.load(this.options.catalogPath);
    this.store = new ModelStore(this.options.home, this.catalog);
    this.manager = new ModelManager(
      {
        keepAliveMs: this.options.keepAliveMs,
        maxMemoryBytes: this.options.maxMemoryBytes,
        maxLoaded: this.options.maxLoaded,
        load: {
          threads: this.options.threads,
          parallel: this.options.parallel,
          maxQueue: this.options.maxQueue,
          contextSizes: this.options.contextSizes,
          cacheRamBytes: this.options.cacheRamBytes,
          kvCacheType: this.options.kvCacheType,
          report: (event) => this.events.emit(event),
        },
        log: this.options.log,
        onBusy: this.options.processes && ((models) => this.options.processes!.setBusy(models)),
      },
      async (model) => {
        const key = loaderKey(model.entry.backend, model.entry.kind);
        const loader = this.options.loaders[key];
        if (!loader) throw new ServerError(`No runtime for ${key} models is available in this build (model '${model.id}')`);
        return loader();
      },
    );
  }

  /**
   * Finds an installed model of one of `kinds` by id or alias. Unknown and
   * not-installed models are 404s that say how to pull; a model of another
   * kind, installed or not, is a 400 that says which kind it is and which
   * model of the kind wanted to use or pull. The words fit an HTTP request
   * and a CLI command alike.
   */
  async resolve(name: string, kinds: readonly ModelKind[], param = 'model'): Promise<InstalledModel> {
    const installed = (await this.store.resolve(name)) ?? (await this.resolveAlias(name, param));
    if (!installed) {
      const entry = this.catalog.get(name);
      // Pulling a model of another kind would not help: say what it is, and what to pull instead.
      if (entry && !kinds.includes(entry.kind)) throw await this.wrongKind(name, entry.kind, kinds, param);
      if (entry && !isBundled(entry)) {
        throw new ModelNotFoundError(`Model '${name}' is not installed. Run \`lserve pull ${entry.id}\` to download it.`, param);
      }
      const close = this.catalog.suggest(name);
      const hint = close.length ? ` Did you mean ${close.map((c) => `'${c}'`).join(', ')}?` : '';
      throw new ModelNotFoundError(`Model '${name}' does not exist.${hint} Run \`lserve list --all\` to see available models.`, param);
    }
    if (!kinds.includes(installed.entry.kind)) throw await this.wrongKind(name, installed.entry.kind, kinds, param);
    return installed;
  }

  /** The 400 for a model of another kind: "'whisper-base' is a speech recognition model, not a speech synthesis model", and what to use instead. */
  private async wrongKind(name: string, kind: ModelKind, wanted: readonly ModelKind[], param: string): Promise<InvalidRequestError> {
    const what = (k: ModelKind) => KIND_NAMES[k].what;
    const fitting = (await this.store.list()).filter((m) => wanted.includes(m.entry.kind) && !isLatentDecoderModel(m)).map((m) => m.id);
    const instead = fitting.length
      ? ` Installed: ${fitting.slice(0, 5).join(', ')}${fitting.length > 5 ? ', …' : ''}.`
      : ` Run \`lserve pull ${KIND_NAMES[wanted[0]!].pull}\` to get one.`;
    return new InvalidRequestError(`Model '${name}' is ${withArticle(what(kind))} model, not ${withArticle(wanted.map(what).join(' or '))} model.${instead}`, {
      param,
      code: 'wrong_model_kind',
    });
  }

  /**
   * What a name no installed model has stands for: the operator's alias, or
   * a name apps hard-code (core/model-choice.ts) standing for its kind's
   * default; undefined for any other name (resolve's 404).
   */
  private async resolveAlias(name: string, param: string): Promise<InstalledModel | undefined> {
    const target = this.options.models.aliases[name];
    if (target !== undefined) {
      const aliased = await this.store.resolve(target);
      if (!aliased) throw new ModelNotFoundError(`'${name}' is an alias of '${target}' (--alias), which is not installed. Run \`lserve pull ${target}\` to get it.`, param);
      return aliased;
    }
    const vendor = vendorName(name);
    if (!vendor) return undefined;
    if (vendor.chat && !this.options.models.vendorChat) {
      const chats = (await this.store.list()).filter((m) => m.entry.kind === 'chat');
      if (chats.length !== 1) {
        throw new ModelNotFoundError(
          `'${name}' is another provider's chat model. ${chats.length === 0 ? 'No chat model is installed' : `Several chat models are installed (${chats.map((m) => m.id).join(', ')})`}: name one, or let such names stand for the default chat model with \`lserve serve --alias-vendor-chat\` (or \`--alias ${name}=MODEL\`).`,
          param,
        );
      }
    }
    return this.store.resolve(await this.defaultModel(vendor.kind, name));
  }

  /** Whether `name` is another provider's name for the default model of `kind`: no installed model or operator's alias answers to it. */
  async standsForDefault(name: string, kind: ModelKind): Promise<boolean> {
    return !(name in this.options.models.aliases) && vendorName(name)?.kind === kind && !(await this.store.resolve(name));
  }

  /** The default of each kind that has a model installed (core/model-choice.ts). */
  async defaults(installed?: readonly InstalledModel[]): Promise<Partial<Record<ModelKind, DefaultPick>>> {
    const models = installed ?? (await this.store.list());
    const picks: Partial<Record<ModelKind, DefaultPick>> = {};
    for (const kind of MODEL_KINDS) {
      const pick = pickDefault(models, kind, this.catalog, this.options.models, this.options.maxMemoryBytes);
      if (pick) picks[kind] = pick;
    }
    return picks;
  }

  /** The names that stand for models now, and the models they stand for (core/model-choice.ts aliasTable). */
  async aliases(): Promise<Array<{ alias: string; model: string; pattern?: true }>> {
    const installed = await this.store.list();
    return aliasTable(installed, await this.defaults(installed), this.options.models);
  }

  /**
   * The model a request of `kind` that names none goes to; a 404 that says
   * what to pull when none is installed. `name`: the name the request used,
   * when it stands for the default (`whisper-1`). `int8`: its int8 twin
   * where that is installed and the operator chose no default
   * (model-choice.ts preferInt8), for work a person waits on.
   */
  async defaultModel(kind: ModelKind, name?: string, options: { int8?: boolean } = {}): Promise<string> {
    const chosen = this.options.models.defaults[kind];
    const installed = await this.store.list();
    const found = pickDefault(installed, kind, this.catalog, this.options.models, this.options.maxMemoryBytes);
    const pick = found && options.int8 ? preferInt8(found, installed, this.catalog) : found;
    if (chosen !== undefined && pick?.how !== 'chosen') {
      throw new ModelNotFoundError(`The default ${KIND_NAMES[kind].what} model is '${chosen}' (--default-model ${kind}=${chosen}), which is not installed as one. Run \`lserve pull ${chosen}\`, or choose another.`);
    }
    if (!pick) throw noModelOfKind(kind, name);
    return pick.id;
  }

  /** Resolves and loads a model, returning a lease the caller must release. */
  async acquire<M extends LoadedModel>(name: string, kinds: readonly ModelKind[], options: { keepAliveMs?: number } = {}): Promise<Lease<M>> {
    const installed = await this.resolve(name, kinds);
    return this.manager.acquire<M>(installed, options.keepAliveMs);
  }

  /**
   * Sizes a text model's context as `--ctx-size <id>=<tokens>` does, from
   * now on (Ollama's `num_ctx`): the next load takes it, and a loaded model
   * of another size is unloaded for it when idle (one answering finishes at
   * its size, and keeps it until it is next loaded).
   */
  async setContextSize(id: string, tokens: number): Promise<void> {
    const sizes = this.options.contextSizes;
    const loaded = this.manager.loaded().find((m) => m.id === id);
    if (sizes.models[id] === tokens && (!loaded || loaded.contextSize === tokens)) return;
    sizes.models[id] = tokens;
    if (loaded && loaded.contextSize !== tokens) await this.manager.unload(id);
  }

  /** Runs `fn` with a loaded model and always releases it; a 503 from `fn` is reported as a rejection by that model. */
  async withModel<M extends LoadedModel, T>(
    name: string,
    kinds: readonly ModelKind[],
    fn: (model: M, installed: InstalledModel) => Promise<T>,
    options: { keepAliveMs?: number } = {},
  ): Promise<T> {
    const lease = await this.acquire<M>(name, kinds, options);
    try {
      return await fn(lease.model, lease.installed);
    } catch (error) {
      this.reportRejection(lease.installed.id, error);
      throw error;
    } finally {
      lease.release();
    }
  }

  /** Tells the listeners of `events` what was done (see events.ts). */
  report(event: EngineEvent): void {
    this.events.emit(event);
  }

  /** Reports `error` as a rejection by `model` when it is a full line (OverloadedError, 503); anything else is not. */
  reportRejection(model: string, error: unknown): void {
    if (error instanceof OverloadedError) this.report({ type: 'rejected', model });
  }

  /**
   * This engine, with what tasks run through it report going to `report`
   * instead: for work whose reports wait for a decision (a realtime turn
   * answered before it ends counts only if the turn ends as expected).
   * Everything else (models, leases, the store) is this engine's own; the
   * view is for passing to tasks, not for changing the engine through it.
   */
  reportingTo(report: (event: EngineEvent) => void): Engine {
    return Object.create(this, { report: { value: report } }) as Engine;
  }

  /** Runs the install-time preparation of a model's family, when it has one (`lserve pull`); resolves to the model as installed afterwards. */
  async prepare(installed: InstalledModel, say?: (line: string) => void): Promise<InstalledModel> {
    const preparer = this.options.preparers[loaderKey(installed.entry.backend, installed.entry.kind)];
    return preparer ? (await preparer()).prepare(this.store, installed, say) : installed;
  }

  /** The live voice activity detector, loaded at first use and shared by every session; a load that failed is tried again next time. */
  voiceActivity(): Promise<VoiceActivityDetector> {
    const load = this.options.voiceActivity;
    if (!load) return Promise.reject(new UnsupportedError('This build has no voice activity detector: use turn_detection null and commit the audio.', { param: 'turn_detection' }));
    if (!this.detector) {
      this.detector = load();
      this.detector.catch(() => (this.detector = undefined));
    }
    return this.detector;
  }

  async close(): Promise<void> {
    const detector = this.detector;
    this.detector = undefined;
    await Promise.all([this.manager.close(), detector?.then((d) => d.release(), () => undefined)]);
  }

  /** Ends every model's process now, not waiting for anything (a shutdown asked for twice). */
  killProcesses(): void {
    this.options.processes?.killAll();
  }
}

/** "an embedding", "a chat": kinds are read aloud in error messages. */
function withArticle(word: string): string {
  return `${/^[aeio]/i.test(word) ? 'an' : 'a'} ${word}`;
}
