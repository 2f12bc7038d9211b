import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { MODEL_KINDS, type ModelKind } from '../core/catalog.js';
import type { ModelChoices } from '../core/model-choice.js';
import { CliError, EXIT_USAGE } from './errors.js';

/**
 * The flags that choose models (core/model-choice.ts): `--default-model
 * KIND=MODEL` (repeatable; also `LSERVE_DEFAULT_MODEL_<KIND>`, the kind in
 * capitals with `_` for `-`), and on `serve` `--alias NAME=MODEL`
 * (repeatable), `--aliases FILE` (a JSON or YAML object of NAME: MODEL) and
 * `--alias-vendor-chat`.
 */

export const DEFAULT_MODEL_HELP = `the model a request of this kind that names none goes to (repeatable; kinds: ${MODEL_KINDS.join(', ')}; also LSERVE_DEFAULT_MODEL_<KIND>); default: the only one installed, else the catalog's preference`;
export const ALIAS_HELP = 'answer requests for NAME with MODEL (repeatable), e.g. --alias gpt-4o-mini=qwen3-4b';
export const ALIASES_HELP = 'a JSON or YAML file of aliases, NAME: MODEL';
export const ALIAS_VENDOR_CHAT_HELP = "answer OpenAI's and Anthropic's chat model names (gpt-*, o1-o4*, claude-*) with the default chat model";

export interface ModelChoiceFlags {
  defaultModel?: string[];
  alias?: string[];
  aliases?: string;
  aliasVendorChat?: boolean;
}

const NAME = /^[^=\s]+$/;

export function modelChoices(flags: ModelChoiceFlags, env: NodeJS.ProcessEnv = process.env): ModelChoices {
  const defaults: Partial<Record<ModelKind, string>> = {};
  for (const kind of MODEL_KINDS) {
    const value = env[`LSERVE_DEFAULT_MODEL_${kind.toUpperCase().replaceAll('-', '_')}`];
    if (value) defaults[kind] = value.trim();
  }
  for (const value of flags.defaultModel ?? []) {
    const [kind, model] = pair(value, '--default-model', 'KIND=MODEL');
    if (!(MODEL_KINDS as readonly string[]).includes(kind)) throw new CliError(`--default-model: '${kind}' is no kind of model (${MODEL_KINDS.join(', ')})`, EXIT_USAGE);
    defaults[kind as ModelKind] = model;
  }
  const aliases: Record<string, string> = flags.aliases ? aliasFile(flags.aliases) : {};
  for (const value of flags.alias ?? []) {
    const [name, model] = pair(value, '--alias', 'NAME=MODEL');
    aliases[name] = model;
  }
  return { defaults, aliases, vendorChat: flags.aliasVendorChat === true };
}

function pair(value: string, flag: string, shape: string): [string, string] {
  const at = value.indexOf('=');
  const [left, right] = [value.slice(0, at).trim(), value.slice(at + 1).trim()];
  if (at < 0 || !NAME.test(left) || !NAME.test(right)) throw new CliError(`${flag} takes ${shape}, got '${value}'`, EXIT_USAGE);
  return [left, right];
}

function aliasFile(file: string): Record<string, string> {
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new CliError(`--aliases ${file}: ${(error as Error).message}`, EXIT_USAGE);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new CliError(`--aliases ${file}: expected an object of NAME: MODEL`, EXIT_USAGE);
  const aliases: Record<string, string> = {};
  for (const [name, model] of Object.entries(parsed)) {
    if (typeof model !== 'string' || !NAME.test(name) || !NAME.test(model)) throw new CliError(`--aliases ${file}: '${name}' must map to a model id, got ${JSON.stringify(model)}`, EXIT_USAGE);
    aliases[name] = model;
  }
  return aliases;
}
