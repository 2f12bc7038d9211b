import type { Command } from 'commander';
import { Engine, type EngineOptions } from '../core/engine.js';
import { parseDuration, parseSize } from '../core/units.js';
import { CliError, EXIT_USAGE } from './errors.js';

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
export interface EngineFlags {
  keepAlive?: string;
  maxMemory?: string;
  maxLoaded?: string;
  threads?: string;
  parallel?: string;
  maxQueue?: string;
}

export function createEngine(global: GlobalOptions, flags: EngineFlags = {}, extra: Partial<EngineOptions> = {}): Engine {
  const options: Partial<EngineOptions> = { ...extra };
  if (global.home) options.home = global.home;
  if (global.catalog) options.catalogPath = global.catalog;
  if (global.verbose) options.log = (m) => process.stderr.write(`[engine] ${m}\n`);
  try {
    if (flags.keepAlive !== undefined) options.keepAliveMs = parseDuration(flags.keepAlive);
    if (flags.maxMemory !== undefined) options.maxMemoryBytes = parseSize(flags.maxMemory);
  } catch (error) {
    throw new CliError((error as Error).message, EXIT_USAGE);
  }
  if (flags.maxLoaded !== undefined) options.maxLoaded = positiveInt(flags.maxLoaded, '--max-loaded');
  if (flags.threads !== undefined) options.threads = positiveInt(flags.threads, '--threads', true);
  if (flags.parallel !== undefined) options.parallel = positiveInt(flags.parallel, '--parallel');
  if (flags.maxQueue !== undefined) options.maxQueue = positiveInt(flags.maxQueue, '--max-queue', true);
  return new Engine(options);
}

export function positiveInt(value: string, flag: string, allowZero = false): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < (allowZero ? 0 : 1)) throw new CliError(`${flag} must be a ${allowZero ? 'non-negative' : 'positive'} integer, got '${value}'`, EXIT_USAGE);
  return n;
}
