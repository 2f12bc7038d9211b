import { Command } from 'commander';
import { existsSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import path from 'node:path';
import { MODEL_KINDS, inputModalities, isBundled, type ModelKind } from '../../core/catalog.js';
import { findProjector } from '../../core/projector.js';
import type { InstalledModel, UserModelOptions } from '../../core/store.js';
import { checkImageDefaults, IMAGE_DEFAULT_KEYS, parseImageDefaults } from '../../core/tasks/image/user-defaults.js';
import { pullModel, pullUrl, type PullResult } from '../../core/download.js';
import type { Engine } from '../../core/engine.js';
import { StoreError } from '../../core/errors.js';
import { formatBytes } from '../../core/units.js';
import { createEngine, globalOptions, HF_TOKEN_FILE_HELP, hubTokenOption, positiveInt } from '../context.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE } from '../errors.js';
import { createPullProgress, formatDuration, progressMode } from '../views/pull-progress.js';

/** Signals that stop a pull cleanly (partial files kept, lock released); the exit status is 128 + the signal's number, as shells report such a death (130 after Ctrl-C). */
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

interface PullFlags {
  kind?: string;
  id?: string;
  backend?: string;
  ctxSize?: string;
  default?: string[];
  /** A path or URL (`--mmproj`); false after `--no-mmproj`. */
  mmproj?: string | false;
  quiet?: boolean;
  hfTokenFile?: string;
}

export function pullCommand(): Command {
  return new Command('pull')
    .description('Download a model from the catalog, or register your own file, directory or URL.')
    .argument('<model>', 'catalog id or alias, a local .gguf/.onnx file, a model directory, or an http(s) URL')
    .option('--kind <kind>', `model kind, required for your own files, directories and URLs (${MODEL_KINDS.join(', ')})`)
    .option('--id <id>', 'id for your own file, directory or URL (default: derived from its name)')
    .option('--backend <name>', 'runtime for your own file or URL (default: llama for .gguf, onnx otherwise); for a directory, only layouts of that backend are tried')
    .option('--ctx-size <tokens>', 'context size for your own single-file text model (default: 4096 chat, 8192 embedding/rerank, capped at its training context)')
    .option('--default <key=value>', `a request default for your own image model, repeatable (${IMAGE_DEFAULT_KEYS.join(', ')}); overrides what its configs say`, (pair: string, all: string[] = []) => [...all, pair])
    .option('--mmproj <file>', "your GGUF chat model's multimodal projector (mmproj-….gguf): images and/or audio in chat; a URL beside a URL. Default: one found beside the model")
    .option('--no-mmproj', 'register your GGUF chat model without the projector found beside it (text only)')
    .option('--hf-token-file <path>', HF_TOKEN_FILE_HELP)
    .option('--quiet', 'no progress output')
    .addHelpText(
      'after',
      [
        '',
        'Downloads go to $LSERVE_HOME/models/<id>/ (default ~/.lserve). An interrupted pull resumes when run again.',
        'Your own files and directories are registered in place, not copied. A directory must have the layout of',
        "a catalog model of that kind (e.g. a clone of onnx-community/whisper-base for --kind asr): its files at the",
        "catalog entry's paths, e.g. onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx, tokenizer.json, ….",
        "A GGUF chat model takes images or audio with its projector: --mmproj, or a file beside it named like one",
        '(mmproj-*.gguf, *-mmproj-*.gguf, *.mmproj.gguf); what it takes is read from the projector.',
        '',
        'Examples:',
        '  $ lserve pull qwen3-0.6b',
        '  $ lserve pull ./my-model.gguf --kind chat',
        '  $ lserve pull ./gemma-3-4b-it-Q4_K_M.gguf --kind chat --mmproj ./mmproj-model-f16.gguf',
        '  $ lserve pull ./whisper-base --kind asr --id my-whisper',
        '  $ lserve pull ./sd-export --kind image      # an optimum-cli export: model_index.json, unet/model.onnx (+ model.onnx_data), …',
        '  $ lserve pull ./lcm-export --kind image --default steps=4 --default guidance_scale=1',
        '  $ lserve pull https://example.com/models/tiny.gguf --kind chat --id tiny',
        '  $ HF_ENDPOINT=https://hf-mirror.example lserve pull whisper-base',
        '  $ HF_TOKEN=hf_… lserve pull my-gated-model     # gated or private: accept its licence on the model page first',
        '  $ lserve pull my-gated-model --hf-token-file ~/.cache/huggingface/token',
      ].join('\n'),
    )
    .action(async (target: string, flags: PullFlags, command: Command) => {
      const engine = createEngine(globalOptions(command));
      try {
        await pull(engine, target, flags);
      } finally {
        await engine.close();
      }
    });
}

async function pull(engine: Engine, target: string, flags: PullFlags): Promise<void> {
  const out = process.stdout;
  const say = (line: string) => {
    if (!flags.quiet) out.write(`${line}\n`);
  };
  const isUrl = /^https?:\/\//i.test(target);
  const entry = isUrl ? undefined : engine.catalog.get(target);
  const localPath = !isUrl && !entry ? localPathOf(target) : undefined;

  if (entry) {
    if (flags.kind || flags.id || flags.backend || flags.ctxSize || flags.default) {
      throw new CliError('--kind, --id, --backend, --ctx-size and --default apply only to your own files and URLs, not to catalog models', EXIT_USAGE);
    }
    if (flags.mmproj !== undefined) {
      const flag = flags.mmproj === false ? '--no-mmproj' : '--mmproj';
      throw new CliError(`${flag} applies only to your own GGUF chat models, not to catalog models: a catalog model's projector comes with it`, EXIT_USAGE);
    }
    if (isBundled(entry)) {
      say(`${entry.id} is bundled with lserve: it is ready to use, there is nothing to pull.`);
      return;
    }
  } else if (!isUrl && !localPath) {
    const close = engine.catalog.suggest(target);
    const hint = close.length ? ` Did you mean ${close.map((c) => `'${c}'`).join(', ')}?` : '';
    throw new CliError(`Unknown model '${target}'.${hint} Run \`lserve list --all\` to see the catalog, or pass a file path or URL with --kind.`, EXIT_FAILURE);
  }
  const kind = entry ? undefined : requireKind(flags.kind, target);
  const directory = localPath !== undefined && isDirectory(localPath);
  if (directory && flags.ctxSize !== undefined) {
    throw new CliError('--ctx-size applies to a single-file (GGUF) text model, not to a model directory', EXIT_USAGE);
  }
  const mmproj = typeof flags.mmproj === 'string' ? flags.mmproj : undefined;
  if (mmproj !== undefined && isUrl !== /^https?:\/\//i.test(mmproj)) {
    throw new CliError(isUrl ? '--mmproj beside a URL is the URL of its projector' : '--mmproj beside a local file is a local file; download the projector first', EXIT_USAGE);
  }
  const own = { kind: kind!, id: flags.id, backend: flags.backend, contextSize: flags.ctxSize === undefined ? undefined : positiveInt(flags.ctxSize, '--ctx-size'), mmproj };
  const defaults = userDefaults(kind, flags.default ?? []);
  if (defaults && !directory) throw new CliError('--default applies to a model directory (an image export), not to a single file or URL', EXIT_USAGE);

  if (localPath && directory) {
    const { model, layout } = await engine.store.registerDirectory(localPath, own).catch(usageOnBadInput);
    say(`Registered ${model.id} (${model.entry.kind}, ${model.entry.backend}, ${formatBytes(model.sizeBytes)}): ${path.resolve(localPath)}`);
    say(`Layout: ${layout.id}${layoutRepo(layout.files)}`);
    const width = Math.max(...Object.keys(model.entry.files).map((r) => r.length));
    for (const [role, spec] of Object.entries(model.entry.files)) say(`  ${role.padEnd(width)}  ${spec.path ?? model.files[role]}`);
    say('The files are used in place: keep the directory where it is.');
    const prepared = await engine.prepare(model, say);
    if (defaults) await applyDefaults(engine, prepared, defaults, say);
    return;
  }

  if (localPath) {
    if (flags.mmproj === undefined && takesProjector(own, localPath)) own.mmproj = await projectorBeside(localPath, say);
    const model = await engine.store.registerLocal(localPath, own).catch(usageOnBadInput);
    say(`Registered ${model.id} (${model.entry.kind}, ${model.entry.backend}, ${formatBytes(model.sizeBytes)}): ${model.files.model}`);
    if (model.files.mmproj) say(`  Projector: ${model.files.mmproj} (takes ${inputModalities(model.entry)!.join(', ')})`);
    say(model.files.mmproj ? 'The files are used in place: keep them where they are.' : 'The file is used in place: keep it where it is.');
    return;
  }

  const hfToken = await hubTokenOption(flags.hfTokenFile);
  const view = createPullProgress(progressMode(out, flags.quiet), out);
  const controller = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => controller.abort(signal);
  for (const signal of STOP_SIGNALS) process.once(signal, onSignal);
  const started = Date.now();
  let result: PullResult;
  try {
    const options = { onProgress: view.onEvent, signal: controller.signal, hfToken };
    result = entry
      ? await pullModel(engine.store, entry.id, options)
      : await pullUrl(engine.store, target, own, options).catch(usageOnBadInput);
  } catch (error) {
    view.stop();
    if (controller.signal.aborted) {
      const name = entry?.id ?? target;
      const status = 128 + os.constants.signals[controller.signal.reason as NodeJS.Signals];
      // A URL's id is decided inside the pull: what it kept goes unmeasured, and unpromised.
      const kept = entry ? await engine.store.partialBytes(entry.id) : undefined;
      throw new CliError(
        kept === undefined
          ? `Interrupted. Whatever was downloaded is kept; run \`lserve pull ${name}\` again to resume.`
          : kept > 0
            ? `Interrupted. The ${formatBytes(kept)} downloaded so far are kept; run \`lserve pull ${name}\` again to resume.`
            : 'Interrupted before anything was downloaded.',
        status,
      );
    }
    throw error;
  } finally {
    for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
  }
  view.stop();
  const { model } = result;
  if (result.alreadyInstalled) {
    say(`${model.id} is already installed (${formatBytes(model.sizeBytes)}) in ${engine.store.modelDir(model.id)}`);
    await engine.prepare(model, say);
    return;
  }
  const seconds = (Date.now() - started) / 1000;
  const rate = seconds > 0 ? ` at ${formatBytes(result.downloadedBytes / seconds)}/s` : '';
  say(`Pulled ${model.id} (${model.entry.kind}, ${formatBytes(model.sizeBytes)}) into ${engine.store.modelDir(model.id)}`);
  if (model.entry.input) say(`  Takes ${inputModalities(model.entry)!.join(', ')}`);
  if (result.downloadedBytes > 0) say(`Downloaded ${formatBytes(result.downloadedBytes)} in ${formatDuration(seconds)}${rate}`);
  // Image models: fp16 graphs are converted to fp32 once, here (engine.prepare: families/stable-diffusion/prepare.ts).
  await engine.prepare(model, say);
}

/** A path to the user's own file: anything that exists, or looks like a path or a model file. */
function localPathOf(target: string): string | undefined {
  if (target.startsWith('file://')) return fileURLToPath(target);
  if (existsSync(target) || /[\\/]/.test(target) || target.startsWith('.') || /\.(gguf|onnx|bin|safetensors)$/i.test(target)) return target;
  return undefined;
}

function isDirectory(file: string): boolean {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

function layoutRepo(files: Record<string, { repo?: string }>): string {
  const repos = [...new Set(Object.values(files).map((f) => f.repo).filter(Boolean))];
  return repos.length ? ` (as in ${repos.join(', ')})` : '';
}

function requireKind(kind: string | undefined, target: string): ModelKind {
  if (!kind) {
    throw new CliError(`--kind is required for your own files and URLs, e.g. \`lserve pull ${target} --kind chat\` (one of ${MODEL_KINDS.join(', ')})`, EXIT_USAGE);
  }
  if (!(MODEL_KINDS as readonly string[]).includes(kind)) throw new CliError(`--kind must be one of ${MODEL_KINDS.join(', ')}, got '${kind}'`, EXIT_USAGE);
  return kind as ModelKind;
}

/** --default pairs, checked before anything is registered; undefined when none were given. */
function userDefaults(kind: ModelKind | undefined, pairs: readonly string[]): Record<string, number> | undefined {
  if (pairs.length === 0) return undefined;
  if (kind !== 'image') throw new CliError(`--default applies to image models (--kind image); for a text model's context use --ctx-size`, EXIT_USAGE);
  try {
    return parseImageDefaults(pairs);
  } catch (error) {
    throw new CliError((error as Error).message, EXIT_USAGE);
  }
}

/**
 * Sets --default over the defaults the model's preparation chose, when they
 * hold together with them; otherwise the registration is undone, so nothing
 * half-configured stays behind.
 */
async function applyDefaults(engine: Engine, model: InstalledModel, defaults: Record<string, number>, say: (line: string) => void): Promise<void> {
  try {
    checkImageDefaults({ ...model.entry.defaults, ...defaults });
  } catch (error) {
    await engine.store.remove(model.id);
    throw new CliError(`--default: ${(error as Error).message}. The registration of ${model.id} was undone.`, EXIT_USAGE);
  }
  await engine.store.setUserDefaults(model.id, defaults);
  say(`  Set by --default: ${Object.entries(defaults).map(([k, v]) => `${k}=${v}`).join(', ')}`);
}

/** A GGUF chat model file that exists: one a projector beside it may be paired with. */
function takesProjector(own: UserModelOptions, file: string): boolean {
  return own.kind === 'chat' && (own.backend ?? 'llama') === 'llama' && /\.gguf$/i.test(file) && existsSync(file);
}

/**
 * The projector found beside a model (core/projector.ts ranks the files named
 * like one), said aloud with how to choose another or none.
 */
async function projectorBeside(file: string, say: (line: string) => void): Promise<string | undefined> {
  const { chosen, candidates, skipped } = await findProjector(file);
  for (const { reason } of skipped) say(`Beside the model, passed over: ${reason}`);
  if (!chosen) return undefined;
  const others = candidates.filter((c) => c !== chosen.file).map((c) => path.basename(c));
  const name = path.basename(chosen.file);
  say(
    others.length
      ? `Taking the projector ${name}: of the ${candidates.length} beside the model, its name shares the most with the model's (also there: ${others.join(', ')}).`
      : `Taking the projector ${name}, found beside the model.`,
  );
  say('  --mmproj FILE pairs another projector; --no-mmproj registers the model without one (text only).');
  return chosen.file;
}

/** Store errors caused by what the user typed (a taken or malformed id, a bad URL) are usage errors. */
function usageOnBadInput(error: unknown): never {
  const usage = ['id_taken', 'invalid_url', 'invalid_kind', 'invalid_option', 'not_a_directory', 'no_layout', 'layout_mismatch', 'path_outside', 'invalid_mmproj'];
  if (error instanceof StoreError && usage.includes(error.code ?? '')) throw new CliError(error.message, EXIT_USAGE);
  throw error;
}
