import { readFile } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';
import { cleanPrompt } from './clip-text.js';

/**
 * CLIP's BPE tokenizer built from the two files Stable Diffusion exports ship
 * (tokenizer/vocab.json + merges.txt): the prompt cleaned as CLIP's reference
 * tokenizer does it (clip-text.ts: ftfy's fixes, HTML entities unescaped
 * twice, whitespace runs to one space, stripped, lower case); words split by
 * CLIP's pattern; byte-level symbols with `</w>` on each word's last one;
 * <|startoftext|> … <|endoftext|> around the text, padded to the 77
 * positions the text encoder was trained with.
 */

export const CLIP_CONTEXT = 77;
const BOS = '<|startoftext|>';
const EOS = '<|endoftext|>';

export interface ClipEncoding {
  /** BOS, up to 75 tokens, EOS, then padding: always `CLIP_CONTEXT` ids. */
  ids: Int32Array;
  /** Whether the prompt had more tokens than fit (they are dropped, as every SD pipeline does). */
  truncated: boolean;
  /** The text the kept tokens spell (normalised: lower case, single spaces); set only when truncated. */
  kept?: string;
}

export class ClipTokenizer {
  readonly bos: number;
  readonly eos: number;

  private constructor(
    private readonly tokenizer: Tokenizer,
    private readonly symbols: readonly string[],
    /** Id padding fills with: 0 ("!") for SD 2.x / SD-Turbo, whose tokenizer pads with it; SD 1.x pads with EOS. */
    readonly padId: number,
  ) {
    const bos = tokenizer.token_to_id(BOS);
    const eos = tokenizer.token_to_id(EOS);
    if (bos === undefined || eos === undefined) throw new Error(`the CLIP vocabulary lacks ${BOS} or ${EOS}`);
    this.bos = bos;
    this.eos = eos;
  }

  static async load(vocabPath: string, mergesPath: string, padId = 0): Promise<ClipTokenizer> {
    const vocab = JSON.parse(await readFile(vocabPath, 'utf8')) as Record<string, number>;
    const lines = (await readFile(mergesPath, 'utf8')).split('\n');
    // CLIP's merges file starts with a version line; the tokenizer uses the first 49152 - 256 - 2 merges.
    const merges = lines.filter((line, i) => line && !(i === 0 && line.startsWith('#version'))).slice(0, 49152 - 256 - 2);
    const symbols: string[] = [];
    for (const [symbol, id] of Object.entries(vocab)) symbols[id] = symbol;
    return new ClipTokenizer(new Tokenizer(clipTokenizerJson(vocab, merges), {}), symbols, padId);
  }

  encode(text: string): ClipEncoding {
    const tokens = this.tokenizer.encode(cleanPrompt(text), { add_special_tokens: false }).ids;
    const room = CLIP_CONTEXT - 2;
    const kept = tokens.slice(0, room);
    const ids = new Int32Array(CLIP_CONTEXT).fill(this.padId);
    ids[0] = this.bos;
    ids.set(kept, 1);
    ids[kept.length + 1] = this.eos;
    if (tokens.length <= room) return { ids, truncated: false };
    return { ids, truncated: true, kept: this.decode(kept) };
  }

  /** Text of byte-level symbols: `</w>` ends a word, each symbol stands for one byte. */
  decode(ids: readonly number[]): string {
    const text = ids.map((id) => this.symbols[id] ?? '').join('').replaceAll('</w>', ' ');
    const bytes: number[] = [];
    for (const char of text) bytes.push(char === ' ' ? 0x20 : (byteOf().get(char) ?? 0x3f));
    return new TextDecoder().decode(new Uint8Array(bytes)).trim();
  }
}

let byteMap: Map<string, number> | undefined;

/** GPT-2/CLIP's bytes_to_unicode, inverted: printable bytes stand for themselves, the rest for U+0100 onwards. */
function byteOf(): Map<string, number> {
  if (byteMap) return byteMap;
  byteMap = new Map();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteMap.set(String.fromCodePoint(printable ? b : 256 + extra++), b);
  }
  return byteMap;
}

function clipTokenizerJson(vocab: Record<string, number>, merges: string[]): Record<string, unknown> {
  const special = (content: string) => ({ id: vocab[content], content, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special(BOS), special(EOS)],
    // encode() hands over text already cleaned (cleanPrompt): normalised, single spaces, lower case.
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+" }, behavior: 'Removed', invert: true },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: EOS, continuing_subword_prefix: '', end_of_word_suffix: '</w>', fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}
