import { readFile } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';

/**
 * Qwen3-TTS's text tokenizer: Qwen2's byte-level BPE. The model repositories
 * ship it as vocab.json + merges.txt + tokenizer_config.json (the slow
 * tokenizer's files), some exports also as tokenizer.json; the former are
 * assembled here into the tokenizer.json that Qwen2TokenizerFast would save.
 */

/** Qwen2's pre-tokenizer split (single digits, case-insensitive contractions). */
const QWEN2_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

interface AddedToken {
  content: string;
  special?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  normalized?: boolean;
  single_word?: boolean;
}

export interface TokenizerConfigJson {
  added_tokens_decoder?: Record<string, AddedToken>;
  [key: string]: unknown;
}

export interface TokenizerFiles {
  tokenizer?: string;
  vocab?: string;
  merges?: string;
  tokenizer_config?: string;
}

export class TtsTokenizer {
  private readonly reserved: string[];

  constructor(
    private readonly tokenizer: Tokenizer,
    addedTokens: readonly string[],
  ) {
    // Longest first, so that no shorter token's removal splits a longer one.
    this.reserved = [...addedTokens].sort((a, b) => b.length - a.length);
  }

  /**
   * Ids of plain text: control-token strings in the text are removed rather
   * than parsed, so input cannot inject prompt structure.
   */
  encode(text: string): number[] {
    let clean = text;
    for (const token of this.reserved) if (clean.includes(token)) clean = clean.split(token).join('');
    return clean ? this.tokenizer.encode(clean, { add_special_tokens: false }).ids : [];
  }

  /** The id of an added token such as `<|im_start|>`. */
  id(token: string): number | undefined {
    return this.tokenizer.token_to_id(token) ?? undefined;
  }
}

export function buildTokenizerJson(vocab: Record<string, number>, merges: string[], config: TokenizerConfigJson): Record<string, unknown> {
  const added = Object.entries(config.added_tokens_decoder ?? {}).map(([id, t]) => ({
    id: Number(id),
    content: t.content,
    single_word: t.single_word ?? false,
    lstrip: t.lstrip ?? false,
    rstrip: t.rstrip ?? false,
    normalized: t.normalized ?? false,
    special: t.special ?? true,
  }));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: 'NFC' },
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [{ type: 'Split', pattern: { Regex: QWEN2_PATTERN }, behavior: 'Isolated', invert: false }, byteLevel],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
}

/** merges.txt: one "left right" pair per line after an optional "#version" header. */
export function parseMerges(text: string): string[] {
  return text.split('\n').filter((line, i) => line.length > 0 && !(i === 0 && line.startsWith('#version')));
}

export async function loadTtsTokenizer(files: TokenizerFiles): Promise<TtsTokenizer> {
  const config: TokenizerConfigJson = files.tokenizer_config ? JSON.parse(await readFile(files.tokenizer_config, 'utf8')) : {};
  let json: Record<string, unknown>;
  if (files.tokenizer) {
    json = JSON.parse(await readFile(files.tokenizer, 'utf8'));
  } else if (files.vocab && files.merges) {
    const [vocab, merges] = await Promise.all([readFile(files.vocab, 'utf8'), readFile(files.merges, 'utf8')]);
    json = buildTokenizerJson(JSON.parse(vocab), parseMerges(merges), config);
  } else {
    throw new Error('the model has neither tokenizer.json nor vocab.json and merges.txt');
  }
  const added = ((json.added_tokens as AddedToken[] | undefined) ?? []).map((t) => t.content);
  return new TtsTokenizer(new Tokenizer(json, config), added);
}
