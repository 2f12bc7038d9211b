import type { Engine } from '../engine.js';
import { InvalidRequestError, LserveError, UnsupportedError } from '../errors.js';
import { isGgufFile } from '../gguf-facts.js';
import { tokenBytes, vocabSpecials } from '../gguf-vocab.js';
import type { InstalledModel } from '../store.js';
import type { ChatModel, ChatRequest } from './chat.js';

/**
 * A chat model's tokenizer and chat template as a client sees them
 * (llama.cpp's /tokenize, /detokenize and /apply-template): ids with or
 * without BOS, each id's piece of text, and a conversation rendered as the
 * prompt the model evaluates.
 */

export interface TokenizeOptions {
  /** Add BOS (and EOS) where the model's tokenizer adds them. */
  addSpecial: boolean;
  /** Read special tokens' text (`<|im_start|>`) as those tokens. */
  parseSpecial: boolean;
}

/** One token and its text: a string, or its bytes where they are no valid UTF-8 on their own (part of a character). */
export interface TokenPiece {
  id: number;
  piece: string | number[];
}

/** The model's main file when it is a GGUF (role `model` of a llama-backend model). */
export function ggufFileOf(installed: InstalledModel): string | undefined {
  const file = installed.files.model;
  return installed.entry.backend === 'llama' && file !== undefined && isGgufFile(file) ? file : undefined;
}

/**
 * The token ids of `text` on a chat model, as llama.cpp's /tokenize gives
 * them: `parseSpecial` false reads control tokens' text as plain text.
 */
export async function tokenizeWith(engine: Engine, installed: InstalledModel, text: string, options: TokenizeOptions): Promise<number[]> {
  const ids = await engine.withModel<ChatModel, number[]>(installed.id, ['chat'], async (loaded) => {
    if (!loaded.tokenize) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not expose its tokens.`);
    return loaded.tokenize(text, options.parseSpecial);
  });
  if (!options.addSpecial) return ids;
  const file = ggufFileOf(installed);
  const specials = file === undefined ? undefined : await vocabSpecials(file);
  if (!specials) return ids;
  return [...(specials.addBos && specials.bos !== undefined ? [specials.bos] : []), ...ids, ...(specials.addEos && specials.eos !== undefined ? [specials.eos] : [])];
}

/** Most pieces answered one model call each, for a vocabulary whose bytes lserve does not read from the GGUF itself. */
export const MAX_PIECES_BY_CALL = 4096;

/** Each id with its piece of text, special tokens spelled out. */
export async function tokenPieces(engine: Engine, installed: InstalledModel, ids: readonly number[]): Promise<TokenPiece[]> {
  const file = ggufFileOf(installed);
  const bytes = file === undefined ? undefined : await tokenBytes(file, ids);
  if (bytes) return ids.map((id, i) => ({ id, piece: pieceOf(bytes[i]!) }));
  if (ids.length > MAX_PIECES_BY_CALL) {
    throw new UnsupportedError(`Model '${installed.id}' gives each token's text one call at a time: 'with_pieces' takes at most ${MAX_PIECES_BY_CALL} tokens on it.`, { param: 'with_pieces' });
  }
  return engine.withModel<ChatModel, TokenPiece[]>(installed.id, ['chat'], async (loaded) => {
    const detokenize = loaded.detokenize?.bind(loaded);
    if (!detokenize) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not expose its tokens.`);
    const pieces: TokenPiece[] = [];
    for (const id of ids) pieces.push({ id, piece: await detokenize([id]) });
    return pieces;
  });
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The piece as text where its bytes are valid UTF-8, else the bytes (llama.cpp's /tokenize). */
function pieceOf(bytes: Uint8Array): string | number[] {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return [...bytes];
  }
}

/** The text of token ids; an id outside the vocabulary is a 400 naming `param`. */
export async function detokenizeWith(engine: Engine, installed: InstalledModel, ids: readonly number[], param = 'tokens'): Promise<string> {
  if (ids.length === 0) return '';
  return engine.withModel<ChatModel, string>(installed.id, ['chat'], async (loaded) => {
    if (!loaded.detokenize) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not expose its tokens.`);
    try {
      return await loaded.detokenize(ids);
    } catch (error) {
      // The model names the field of the route it was written for: this request's field is `param`.
      if (error instanceof LserveError && error.status === 400) throw new InvalidRequestError(error.message, { param, code: error.code ?? 'invalid_value' });
      throw error;
    }
  });
}

/** The prompt `request` becomes in its model's chat template, as text, special tokens spelled out (ready to continue with a raw completion). */
export async function renderChatPrompt(engine: Engine, request: ChatRequest): Promise<string> {
  return engine.withModel<ChatModel, string>(
    request.model,
    ['chat'],
    async (loaded, installed) => {
      if (!loaded.renderPrompt) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not show its prompt as text.`);
      return loaded.renderPrompt(request);
    },
    { keepAliveMs: request.keepAliveMs },
  );
}
