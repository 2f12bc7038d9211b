import { fileMemo } from './file-memo.js';
import path from 'node:path';

/**
 * What a GGUF model's own header says about it: architecture, context and
 * embedding length, parameter count, storage type, chat template, and
 * whether it declares fill-in-the-middle tokens. Read, as projector.ts reads
 * a projector, with node-llama-cpp's JavaScript GGUF parser (imported on
 * first use, never the native addon), so nothing loads; each file is read
 * once per modification (path, size and mtime key a small cache).
 *
 * The metadata is also kept flat, with dotted keys as the file spells them
 * (`general.architecture`, `qwen3.context_length`), for whoever shows it
 * (Ollama's /api/show `model_info`). The tokenizer's large arrays are left
 * out of the cached read; `ggufMetadata(file, { full: true })` reads them.
 */

export type GgufValue = string | number | boolean | GgufValue[];

export interface GgufFacts {
  /** `general.architecture` (qwen3, llama, bert, clip, …). */
  architecture?: string;
  /** `general.name`. */
  name?: string;
  /** `general.size_label` as the converter wrote it (`0.6B`). */
  sizeLabel?: string;
  /** `general.license`. */
  license?: string;
  /** `<arch>.context_length`: the training context. */
  contextLength?: number;
  /** `<arch>.embedding_length`: the width of the model. */
  embeddingLength?: number;
  /** `general.parameter_count`, else the sum of every tensor's elements. */
  parameterCount?: number;
  /** `general.file_type` (llama.cpp's `llama_ftype`). */
  fileType?: number;
  /** That file type's name as llama.cpp's quantizer calls it (`Q4_K_M`, `Q8_0`, `F16`); undefined when unknown. */
  quantization?: string;
  /** `tokenizer.chat_template`. */
  chatTemplate?: string;
  /**
   * The tokenizer declares fill-in-the-middle tokens: `tokenizer.ggml.fim_pre_token_id`,
   * `fim_suf_token_id` and `fim_mid_token_id`, or the older `prefix_token_id`,
   * `suffix_token_id` and `middle_token_id` (all three of either set).
   */
  hasFim: boolean;
  /** The chat template takes tool definitions. */
  templateTools: boolean;
  /** The chat template has a thinking mode (`<think>` tags, `enable_thinking`, a `thinking` field). */
  templateThinking: boolean;
  /** Every metadata key, dotted, without the tokenizer's large arrays. */
  metadata: Record<string, GgufValue>;
}

/** The tokenizer's arrays: large (150k entries), and of no use to a listing. */
export const GGUF_TOKENIZER_ARRAYS = ['tokenizer.ggml.tokens', 'tokenizer.ggml.merges', 'tokenizer.ggml.token_type', 'tokenizer.ggml.scores', 'tokenizer.ggml.added_tokens'];

const FIM_SETS = [
  ['fim_pre_token_id', 'fim_suf_token_id', 'fim_mid_token_id'],
  ['prefix_token_id', 'suffix_token_id', 'middle_token_id'],
];


/** Whether a file is a GGUF by its name (what the store's backends go by). */
export function isGgufFile(file: string): boolean {
  return /\.gguf$/i.test(file);
}

/** The facts of a GGUF file, or undefined when it is missing or no GGUF (a listing shows what it can); kept for the last 64 files read. */
export const ggufFacts: (file: string) => Promise<GgufFacts | undefined> = fileMemo(readFacts, 64);

/** Every metadata key of a GGUF file, dotted; `full` keeps the tokenizer's arrays too (not cached: they are large). */
export async function ggufMetadata(file: string, options: { full?: boolean } = {}): Promise<Record<string, GgufValue> | undefined> {
  if (!options.full) return (await ggufFacts(file))?.metadata;
  return readHeader(path.resolve(file), false).then(
    (header) => header.metadata,
    () => undefined,
  );
}

async function readHeader(file: string, lean: boolean): Promise<{ metadata: Record<string, GgufValue>; tensorElements?: number; fileTypeName: (type: number) => string | undefined }> {
  const { readGgufFileInfo, GgufFileType } = await import('node-llama-cpp');
  const info = await readGgufFileInfo(file, {
    readTensorInfo: lean,
    logWarnings: false,
    sourceType: 'filesystem',
    spliceSplitFiles: false,
    ...(lean ? { ignoreKeys: GGUF_TOKENIZER_ARRAYS } : {}),
  });
  const metadata: Record<string, GgufValue> = {};
  flatten(info.metadata, '', metadata);
  const tensorElements = info.tensorInfo?.reduce((sum, t) => sum + t.dimensions.reduce<number>((n, d) => n * Number(d), 1), 0);
  // node-llama-cpp names llama.cpp's file types MOSTLY_Q4_K_M, ALL_F32: the quantizer's own names are what follows.
  const fileTypeName = (type: number) => (GgufFileType as unknown as Record<number, string | undefined>)[type]?.replace(/^(MOSTLY|ALL)_/, '');
  return { metadata, tensorElements, fileTypeName };
}

async function readFacts(file: string): Promise<GgufFacts> {
  const { metadata, tensorElements, fileTypeName } = await readHeader(file, true);
  const str = (key: string) => (typeof metadata[key] === 'string' ? (metadata[key] as string) : undefined);
  const num = (key: string) => (typeof metadata[key] === 'number' ? (metadata[key] as number) : undefined);
  const architecture = str('general.architecture');
  const fileType = num('general.file_type');
  const chatTemplate = str('tokenizer.chat_template');
  return {
    architecture,
    name: str('general.name'),
    sizeLabel: str('general.size_label'),
    license: str('general.license'),
    contextLength: architecture ? num(`${architecture}.context_length`) : undefined,
    embeddingLength: architecture ? num(`${architecture}.embedding_length`) : undefined,
    parameterCount: num('general.parameter_count') ?? (tensorElements || undefined),
    fileType,
    quantization: fileType === undefined ? undefined : fileTypeName(fileType),
    chatTemplate,
    hasFim: FIM_SETS.some((set) => set.every((key) => typeof metadata[`tokenizer.ggml.${key}`] === 'number')),
    templateTools: chatTemplate !== undefined && /\btools\b/.test(chatTemplate),
    templateThinking: chatTemplate !== undefined && /<think>|enable_thinking|\bthinking\b|reasoning_content/.test(chatTemplate),
    metadata,
  };
}

/** node-llama-cpp's nested metadata (it splits keys at dots) as dotted keys; bigints as numbers, so it is JSON. */
function flatten(node: unknown, prefix: string, out: Record<string, GgufValue>): void {
  if (node !== null && typeof node === 'object' && !Array.isArray(node)) {
    for (const [key, value] of Object.entries(node)) flatten(value, prefix ? `${prefix}.${key}` : key, out);
    return;
  }
  const value = plain(node);
  if (value !== undefined && prefix) out[prefix] = value;
}

function plain(value: unknown): GgufValue | undefined {
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
  if (Array.isArray(value)) return value.map((v) => plain(v) ?? null).filter((v): v is GgufValue => v !== null);
  return undefined;
}
