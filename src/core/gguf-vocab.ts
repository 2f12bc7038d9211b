import { fileMemo } from './file-memo.js';
import { GGUF_TOKENIZER_ARRAYS, ggufFacts } from './gguf-facts.js';

/**
 * What a GGUF model's tokenizer header says about its special tokens, read
 * without loading the model (gguf-facts.ts): the BOS and EOS tokens and
 * whether tokenizing adds them, and the fill-in-the-middle tokens it
 * declares; and, read on demand, the bytes each token stands for.
 *
 * The defaults where a key is absent are llama.cpp's: a SentencePiece
 * (`llama`) or WordPiece (`bert`) vocabulary adds BOS, a byte-level BPE
 * (`gpt2`) one does not; nothing adds EOS.
 */
export interface VocabSpecials {
  /** `tokenizer.ggml.model`: llama (SentencePiece), gpt2 (byte-level BPE), bert, t5, … */
  model?: string;
  bos?: number;
  eos?: number;
  addBos: boolean;
  addEos: boolean;
  /** Fill-in-the-middle token ids the header declares (`fim_*_token_id`, or the older `prefix_`, `suffix_`, `middle_token_id`). */
  fim: Partial<Record<FimRole, number>>;
}

/** llama.cpp's names: FIM_PRE, FIM_SUF, FIM_MID, FIM_REP (the repository's name follows), FIM_SEP (a file's). */
export type FimRole = 'pre' | 'suf' | 'mid' | 'rep' | 'sep';

const FIM_KEYS: Record<FimRole, string[]> = {
  pre: ['fim_pre_token_id', 'prefix_token_id'],
  suf: ['fim_suf_token_id', 'suffix_token_id'],
  mid: ['fim_mid_token_id', 'middle_token_id'],
  rep: ['fim_rep_token_id'],
  sep: ['fim_sep_token_id'],
};

/** The special tokens of a GGUF file's tokenizer; undefined when it is no readable GGUF. */
export async function vocabSpecials(file: string): Promise<VocabSpecials | undefined> {
  const facts = await ggufFacts(file);
  if (!facts) return undefined;
  const meta = facts.metadata;
  const num = (key: string) => (typeof meta[`tokenizer.ggml.${key}`] === 'number' ? (meta[`tokenizer.ggml.${key}`] as number) : undefined);
  const bool = (key: string) => (typeof meta[`tokenizer.ggml.${key}`] === 'boolean' ? (meta[`tokenizer.ggml.${key}`] as boolean) : undefined);
  const model = typeof meta['tokenizer.ggml.model'] === 'string' ? (meta['tokenizer.ggml.model'] as string) : undefined;
  const fim: Partial<Record<FimRole, number>> = {};
  for (const [role, keys] of Object.entries(FIM_KEYS) as Array<[FimRole, string[]]>) {
    const id = keys.map(num).find((v) => v !== undefined);
    if (id !== undefined) fim[role] = id;
  }
  const bos = num('bos_token_id') ?? (model === 'llama' ? 1 : undefined);
  return {
    model,
    bos,
    eos: num('eos_token_id'),
    addBos: bos !== undefined && (bool('add_bos_token') ?? (model === 'llama' || model === 'bert')),
    addEos: bool('add_eos_token') ?? false,
    fim,
  };
}


/** The token texts and types (llama.cpp's: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte). */
interface Vocabulary {
  model?: string;
  tokens: string[];
  types?: number[];
}

/** Vocabularies kept (150k strings each): the one or two models a client is tokenizing with. */
const vocabulary = fileMemo(readVocabulary, 2);

async function readVocabulary(file: string): Promise<Vocabulary | undefined> {
  const { readGgufFileInfo } = await import('node-llama-cpp');
  const info = await readGgufFileInfo(file, {
    readTensorInfo: false,
    logWarnings: false,
    sourceType: 'filesystem',
    spliceSplitFiles: false,
    ignoreKeys: GGUF_TOKENIZER_ARRAYS.filter((k) => k !== 'tokenizer.ggml.tokens' && k !== 'tokenizer.ggml.token_type'),
  });
  const ggml = info.metadata?.tokenizer?.ggml as { model?: unknown; tokens?: unknown; token_type?: unknown } | undefined;
  const tokens = ggml?.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => typeof t === 'string')) return undefined;
  const types = Array.isArray(ggml?.token_type) && ggml.token_type.length === tokens.length ? (ggml.token_type as number[]) : undefined;
  return { model: typeof ggml?.model === 'string' ? ggml.model : undefined, tokens: tokens as string[], types };
}

/**
 * The bytes each token stands for, as llama.cpp's token_to_piece gives
 * them with special tokens spelled out: a byte-level BPE token's characters
 * mapped back to bytes (GPT-2's byte-to-character table), a SentencePiece
 * byte token (`<0xC3>`) as its byte and `▁` as a space, a control or
 * user-defined token as its text. Undefined for another kind of
 * vocabulary, or an id outside it.
 */
export async function tokenBytes(file: string, ids: readonly number[]): Promise<Uint8Array[] | undefined> {
  const vocab = await vocabulary(file);
  if (!vocab || ids.some((id) => vocab.tokens[id] === undefined)) return undefined;
  const decode = vocab.model === 'gpt2' ? byteLevelBytes : vocab.model === 'llama' ? sentencePieceBytes : undefined;
  if (!decode) return undefined;
  return ids.map((id) => {
    const type = vocab.types?.[id];
    return type === 3 || type === 4 ? new TextEncoder().encode(vocab.tokens[id]!) : decode(vocab.tokens[id]!);
  });
}

let charToByte: Map<number, number> | undefined;

/** GPT-2's bytes_to_unicode, inverted: printable bytes stand for themselves, the rest for 256 + n in order. */
function byteLevelTable(): Map<number, number> {
  if (charToByte) return charToByte;
  const table = new Map<number, number>();
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table.set(printable ? b : next++, b);
  }
  return (charToByte = table);
}

function byteLevelBytes(text: string): Uint8Array {
  const table = byteLevelTable();
  const out: number[] = [];
  for (const char of text) {
    const code = char.codePointAt(0)!;
    const byte = table.get(code);
    // A character outside the table (an added token kept as text) is its own UTF-8.
    if (byte !== undefined) out.push(byte);
    else out.push(...new TextEncoder().encode(char));
  }
  return Uint8Array.from(out);
}

function sentencePieceBytes(text: string): Uint8Array {
  const byte = /^<0x([0-9A-Fa-f]{2})>$/.exec(text);
  if (byte) return Uint8Array.of(parseInt(byte[1]!, 16));
  return new TextEncoder().encode(text.replaceAll('\u2581', ' '));
}
