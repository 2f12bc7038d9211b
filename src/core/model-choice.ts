import type { Catalog, ModelKind } from './catalog.js';
import { InvalidRequestError, ModelNotFoundError } from './errors.js';
import type { InstalledModel } from './store.js';

/**
 * One model per task, chosen once: which installed model serves a request
 * that names none (the default of its kind), and what the model names apps
 * hard-code stand for.
 *
 * The default of a kind, by precedence:
 * 1. the one the operator chose (`--default-model KIND=MODEL`,
 *    `LSERVE_DEFAULT_MODEL_<KIND>`);
 * 2. the only one installed;
 * 3. the first installed in the catalog's order of preference for its kind
 *    (models.json `preference`: best quality first) whose files fit the
 *    memory budget, else the first of them that does not;
 * 4. then models the catalog does not rank (a user's own files), the most
 *    recently pulled first.
 *
 * Names apps hard-code (OpenAI's `whisper-1`, `tts-1`, `text-embedding-3-small`,
 * `gpt-image-1`, …) stand for the default of their kind wherever no
 * installed model has that name; OpenAI's and Anthropic's chat model names
 * (`gpt-*`, `o3`, `claude-*`) only when the operator asks for it
 * (`--alias-vendor-chat`) or one chat model is all there is, since answering
 * a request for a frontier model with a small local one is a choice to make
 * knowingly. The operator's own aliases (`--alias NAME=MODEL`, `--aliases
 * FILE`) come first.
 */

export interface ModelChoices {
  /** Per kind, the model the operator chose as its default. */
  defaults: Partial<Record<ModelKind, string>>;
  /** Names the operator mapped onto models (id or alias). */
  aliases: Record<string, string>;
  /** OpenAI's and Anthropic's chat model names answer with the default chat model. */
  vendorChat: boolean;
}

export const NO_CHOICES: ModelChoices = { defaults: {}, aliases: {}, vendorChat: false };

/** How a kind's default was decided, for logs, listings and errors. */
export type PickReason = 'chosen' | 'only' | 'preferred' | 'latest';

export interface DefaultPick {
  id: string;
  kind: ModelKind;
  how: PickReason;
  /** Models of the kind installed (the default among them). */
  installed: number;
}

/** Words for each kind in messages, and the model to pull for it. */
export const KIND_NAMES: Record<ModelKind, { what: string; pull: string }> = {
  chat: { what: 'chat', pull: 'qwen3-0.6b' },
  embedding: { what: 'embedding', pull: 'bge-small-en-v1.5' },
  rerank: { what: 'rerank', pull: 'bge-reranker-v2-m3' },
  ocr: { what: 'OCR', pull: 'ppocr-v5-mobile' },
  asr: { what: 'speech recognition', pull: 'whisper-base' },
  'asr-stream': { what: 'streaming speech recognition', pull: 'zipformer-en-streaming' },
  tts: { what: 'speech synthesis', pull: 'piper-en-lessac' },
  image: { what: 'image', pull: 'sd-turbo' },
};

/** A latent decoder as an ONNX graph (file role of an `image` model). */
export const LATENT_DECODER_ROLE = 'latent_decoder';
/** A latent decoder as TAESD's safetensors weights (the graph is built at load). */
export const DECODER_WEIGHTS_ROLE = 'decoder_weights';

/** Whether an installed model is a latent decoder (TAESD-class): an image model's helper, never a kind's default. */
export function isLatentDecoderModel(installed: InstalledModel): boolean {
  return installed.files[LATENT_DECODER_ROLE] !== undefined || installed.files[DECODER_WEIGHTS_ROLE] !== undefined;
}

/**
 * The default of `kind` among `installed` (every installed model); undefined
 * when none of the kind is installed. A chosen model that is not installed
 * (or of another kind) is no pick: resolveChosen reports it.
 */
export function pickDefault(installed: readonly InstalledModel[], kind: ModelKind, catalog: Catalog, choices: ModelChoices, budgetBytes: number): DefaultPick | undefined {
  const ofKind = installed.filter((m) => m.entry.kind === kind && !isLatentDecoderModel(m));
  if (ofKind.length === 0) return undefined;
  const pick = (model: InstalledModel, how: PickReason): DefaultPick => ({ id: model.id, kind, how, installed: ofKind.length });
  const chosen = choices.defaults[kind];
  const named = chosen === undefined ? undefined : ofKind.find((m) => m.id === chosen || m.entry.aliases.includes(chosen));
  if (named) return pick(named, 'chosen');
  if (ofKind.length === 1) return pick(ofKind[0]!, 'only');
  const ranked = (catalog.preference[kind] ?? []).flatMap((id) => ofKind.filter((m) => m.id === id));
  const fits = ranked.find((m) => m.sizeBytes <= budgetBytes) ?? ranked[0];
  if (fits) return pick(fits, 'preferred');
  const latest = [...ofKind].sort((a, b) => (b.installedAt ?? '').localeCompare(a.installedAt ?? ''))[0]!;
  return pick(latest, 'latest');
}

/**
 * For work a person waits on word by word (a Realtime session's turns, whose
 * answer waits for the transcript): the default itself when the operator
 * chose it, else its int8 twin when that is installed: the catalog's entry
 * `<id>-q8` of the same kind (the same model, its weights in 8 bits:
 * `whisper-base-q8` for `whisper-base`), which does the same work in about
 * 60 % of the time on a CPU.
 */
export function preferInt8(pick: DefaultPick, installed: readonly InstalledModel[], catalog: Catalog): DefaultPick {
  if (pick.how === 'chosen') return pick;
  const twin = catalog.get(`${pick.id}-q8`);
  if (!twin || twin.kind !== pick.kind || !installed.some((m) => m.id === twin.id && m.entry.kind === pick.kind)) return pick;
  return { ...pick, id: twin.id };
}

/** The 404 for a kind with no model installed: what to pull. */
export function noModelOfKind(kind: ModelKind, name?: string): ModelNotFoundError {
  const { what, pull } = KIND_NAMES[kind];
  const stands = name ? `'${name}' stands for the default ${what} model, and no ${what} model is installed` : `No ${what} model is installed`;
  return new ModelNotFoundError(`${stands}. Run \`lserve pull ${pull}\` to get one.`);
}

/** OpenAI's names of its models, by the kind each stands for here. */
const VENDOR_NAMES: Record<string, ModelKind> = {
  'whisper-1': 'asr',
  'gpt-4o-transcribe': 'asr',
  'gpt-4o-mini-transcribe': 'asr',
  'tts-1': 'tts',
  'tts-1-hd': 'tts',
  'gpt-4o-mini-tts': 'tts',
  'text-embedding-3-small': 'embedding',
  'text-embedding-3-large': 'embedding',
  'text-embedding-ada-002': 'embedding',
  'gpt-image-1': 'image',
  'gpt-image-1-mini': 'image',
  'dall-e-2': 'image',
  'dall-e-3': 'image',
};

/** OpenAI's and Anthropic's chat model families: gpt-…, chatgpt-…, o1 … o4(-…), claude-…. */
const VENDOR_CHAT = /^(?:gpt-|chatgpt-|claude-|o[1-4](?:-|$))/;

export interface VendorName {
  kind: ModelKind;
  /** A chat family name: answered only with --alias-vendor-chat or a single chat model. */
  chat: boolean;
}

/** The kind a name apps hard-code stands for; undefined for any other name. */
export function vendorName(name: string): VendorName | undefined {
  if (/-diarize$/.test(name)) {
    throw new InvalidRequestError(`'${name}' asks for speaker diarization, which this server does not do: send 'whisper-1' or a speech recognition model's id.`, { param: 'model', code: 'unsupported_model' });
  }
  const kind = VENDOR_NAMES[name];
  if (kind) return { kind, chat: false };
  return VENDOR_CHAT.test(name) ? { kind: 'chat', chat: true } : undefined;
}

/** The chat families VENDOR_CHAT matches, as patterns to show. */
const VENDOR_CHAT_PATTERNS = ['gpt-*', 'chatgpt-*', 'o[1-4]*', 'claude-*'];

/**
 * Every name that answers with a model without being its id, and the model
 * it answers with now (GET /v1/models lists them apart from the models):
 * the operator's aliases, the names apps hard-code whose kind has a default
 * and no installed model of that name, and the chat families while they
 * stand for the default chat model.
 */
export function aliasTable(installed: readonly InstalledModel[], picks: Partial<Record<ModelKind, DefaultPick>>, choices: ModelChoices): Array<{ alias: string; model: string; pattern?: true }> {
  const ids = new Set(installed.flatMap((m) => [m.id, ...m.entry.aliases]));
  const rows: Array<{ alias: string; model: string; pattern?: true }> = Object.entries(choices.aliases).map(([alias, model]) => ({ alias, model }));
  for (const [alias, kind] of Object.entries(VENDOR_NAMES)) {
    const pick = picks[kind];
    if (pick && !ids.has(alias) && !(alias in choices.aliases)) rows.push({ alias, model: pick.id });
  }
  const chat = picks.chat;
  if (chat && (choices.vendorChat || chat.installed === 1)) for (const alias of VENDOR_CHAT_PATTERNS) rows.push({ alias, model: chat.id, pattern: true });
  return rows;
}
