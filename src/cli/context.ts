import type { Command } from 'commander';
import { KV_CACHE_TYPES, type ContextSizes, type KvCacheType } from '../core/loader.js';
import { Engine, type EngineOptions } from '../compose.js';
import { parseByteSize, parseDuration } from '../core/units.js';
import type { ModelKind } from '../core/catalog.js';
import { KIND_NAMES } from '../core/model-choice.js';
import { envHubToken, readHubTokenFile, type HubToken } from '../core/hub-auth.js';
import { CliError, EXIT_USAGE } from './errors.js';
import { modelChoices, type ModelChoiceFlags } from './model-choice-flags.js';

/** Options every subcommand inherits from the program. */
export interface GlobalOptions {
  home?: string;
  /** A models.json to use instead of the shipped catalog (also $LSERVE_CATALOG). */
  catalog?: string;
  verbose?: boolean;
}

export function globalOptions(command: Command): GlobalOptions {
  return command.optsWithGlobals<GlobalOptions>();
}

/** Engine options from the flags that tune it (shared by serve, run, ocr, …). */
export interface EngineFlags extends ModelChoiceFlags {
  keepAlive?: string;
  maxMemory?: string;
  maxLoaded?: string;
  threads?: string;
  parallel?: string;
  maxQueue?: string;
  /** `--ctx-size N` or `--ctx-size MODEL=N`, repeatable. */
  ctxSize?: string[];
  /** `--cache-ram SIZE`: host memory for conversations a chat model's sequence gives up. */
  cacheRam?: string;
  /** `--kv-cache-type f32|f16|q8_0`: the KV cache type of chat models. */
  kvCacheType?: string;
}

export function createEngine(global: GlobalOptions, flags: EngineFlags = {}, extra: Partial<EngineOptions> = {}): Engine {
  const options: Partial<EngineOptions> = { ...extra };
  if (global.home) options.home = global.home;
  if (global.catalog) options.catalogPath = global.catalog;
  if (global.verbose) options.log = (m) => process.stderr.write(`[engine] ${m}\n`);
  try {
    if (flags.keepAlive !== undefined) options.keepAliveMs = parseDuration(flags.keepAlive);
    if (flags.maxMemory !== undefined) options.maxMemoryBytes = parseByteSize(flags.maxMemory);
    if (flags.cacheRam !== undefined) options.cacheRamBytes = flags.cacheRam.trim() === '0' ? 0 : parseByteSize(flags.cacheRam);
  } catch (error) {
    throw new CliError((error as Error).message, EXIT_USAGE);
  }
  if (flags.maxLoaded !== undefined) options.maxLoaded = positiveInt(flags.maxLoaded, '--max-loaded');
  if (flags.threads !== undefined) options.threads = positiveInt(flags.threads, '--threads', true);
  if (flags.parallel !== undefined) options.parallel = positiveInt(flags.parallel, '--parallel');
  if (flags.maxQueue !== undefined) options.maxQueue = positiveInt(flags.maxQueue, '--max-queue', true);
  if (flags.ctxSize?.length) options.contextSizes = parseContextSizes(flags.ctxSize);
  if (flags.kvCacheType !== undefined) options.kvCacheType = parseKvCacheType(flags.kvCacheType);
  options.models = modelChoices(flags);
  return new Engine(options);
}

/** Help text of `--hf-token-file` (pull, serve). */
export const HF_TOKEN_FILE_HELP = 'read a Hugging Face access token from this file, for gated and private models (default: $HF_TOKEN); sent to the hub only';

/**
 * The Hugging Face token `--hf-token-file` names (it wins over HF_TOKEN), else
 * HF_TOKEN's; a file that cannot be read or holds no token is a usage error,
 * found before any download starts.
 */
export async function hubTokenOption(file: string | undefined): Promise<HubToken | undefined> {
  try {
    return file === undefined ? envHubToken() : await readHubTokenFile(file);
  } catch (error) {
    throw new CliError((error as Error).message, EXIT_USAGE);
  }
}

/** Help text of the repeatable `--ctx-size` option (serve, run). */
export const CTX_SIZE_HELP = 'tokens per context for text models: N for every model, MODEL=N for one (repeatable); default for chat: the training context up to 65536 as memory allows (8-bit KV cache before less than 32768; grown for longer conversations), 8192 for embeddings and rerank';

/** Help text of `--cache-ram` (serve, run). */
export const CACHE_RAM_HELP = 'host memory for chat conversations whose sequence another request needs, restored when they come back (e.g. 4gb; 0 = none); default 8gb';

/** Help text of `--kv-cache-type` (serve, run). */
export const KV_CACHE_TYPE_HELP =
  'KV cache type of chat models: f32 (logprobs closest to an fp32 reference, for evaluation; twice the memory of f16, no flash attention), f16, q8_0 (half the memory of f16); default f16, q8_0 where memory is short';

/** `--kv-cache-type`'s value, checked (commander's choices check it first on the command line and in its environment variable). */
export function parseKvCacheType(value: string): KvCacheType {
  const type = KV_CACHE_TYPES.find((t) => t === value);
  if (!type) throw new CliError(`--kv-cache-type must be one of ${KV_CACHE_TYPES.join(', ')}, got '${value}'`, EXIT_USAGE);
  return type;
}

/** Collects a repeatable option's values (commander's argParser). */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** `--ctx-size` values: "8192" applies to every model, "bge-small=512" to one (by id or alias). */
export function parseContextSizes(values: readonly string[]): ContextSizes {
  const sizes: ContextSizes = { models: {} };
  for (const value of values) {
    const match = /^(?:([^=\s]+)=)?(\d+)$/.exec(value.trim());
    const tokens = match ? Number(match[2]) : NaN;
    if (!match || !Number.isSafeInteger(tokens) || tokens < 16) throw new CliError(`--ctx-size takes N or MODEL=N with N ≥ 16 tokens, got '${value}'`, EXIT_USAGE);
    if (match[1]) sizes.models[match[1]] = tokens;
    else sizes.all = tokens;
  }
  return sizes;
}

export function positiveInt(value: string, flag: string, allowZero = false): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < (allowZero ? 0 : 1)) throw new CliError(`${flag} must be a ${allowZero ? 'non-negative' : 'positive'} integer, got '${value}'`, EXIT_USAGE);
  return n;
}

/** The model a command runs: `-m`, else its kind's default, which `--verbose` names on stderr. */
export async function commandModel(engine: Engine, kind: ModelKind, named: string | undefined, global: GlobalOptions): Promise<string> {
  if (named) return named;
  const id = await engine.defaultModel(kind);
  if (global.verbose) process.stderr.write(`using ${id}, the default ${KIND_NAMES[kind].what} model (-m to name another; --default-model ${kind}=MODEL to change the default)\n`);
  return id;
}
