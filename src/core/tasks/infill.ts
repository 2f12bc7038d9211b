import type { Engine } from '../engine.js';
import { UnsupportedError } from '../errors.js';
import { vocabSpecials, type FimRole } from '../gguf-vocab.js';
import type { InstalledModel } from '../store.js';
import type { ChatDelta, ChatModel, CompletionRequest } from './chat.js';
import { complete } from './complete.js';
import { ggufFileOf } from './tokenize.js';

/**
 * Code infilling with context from other files (llama.cpp's /infill): the
 * text before and after the cursor, what was typed at it, and chunks of
 * other files, laid out in the repository-level fill-in-the-middle prompt
 * of Qwen2.5-Coder's report (arXiv 2409.12186) as llama.cpp's server lays
 * it out (format_prompt_infill):
 *
 *   <REPO>myproject\n                       where the model has a repository token
 *   <SEP>{filename}\n{text}                 each chunk, where it has a file separator
 *   <SEP>filename\n                         (without one: "\n\n--- snippet ---\n\n" before each chunk)
 *   <PRE>{prefix}{prompt}<SUF>{suffix}<MID>
 *
 * Each piece is tokenized on its own, as llama.cpp does: the special
 * tokens' text in the prefix, suffix and chunks read as plain text, in the
 * client's `prompt` as those tokens. The completion task gets the tokens.
 */
export interface InfillRequest extends Omit<CompletionRequest, 'prompt' | 'suffix'> {
  inputPrefix: string;
  inputSuffix: string;
  /** Text after the prefix, special tokens read as such. */
  prompt: string;
  extra: Array<{ filename: string; text: string }>;
}

/** The repository's name and the current file's, as llama.cpp's server writes them. */
const REPO_NAME = 'myproject\n';
const CURRENT_FILE = 'filename\n';
/** Before each chunk where the model has no file separator. */
const SNIPPET_SEPARATOR = '\n\n--- snippet ---\n\n';

/** The texts llama.cpp recognises each FIM token by when the GGUF declares no id for it (llama-vocab.cpp). */
const FIM_TEXTS: Record<FimRole, string[]> = {
  pre: ['<|fim_prefix|>', '<fim-prefix>', '<fim_prefix>', '<｜fim▁begin｜>', '<PRE>', '▁<PRE>', '<|code_prefix|>', '<|prefix|>'],
  suf: ['<|fim_suffix|>', '<fim-suffix>', '<fim_suffix>', '<｜fim▁hole｜>', '<SUF>', '▁<SUF>', '<|code_suffix|>', '<|suffix|>'],
  mid: ['<|fim_middle|>', '<fim-middle>', '<fim_middle>', '<｜fim▁end｜>', '<MID>', '▁<MID>', '<|code_middle|>', '<|middle|>'],
  rep: ['<|fim_repo|>', '<|repo_name|>', '<fim-repo>', '<REPO>', '<reponame>'],
  sep: ['<|file_sep|>'],
};

/** One piece of the prompt: a FIM token's text or the client's `prompt` (`special`: special tokens' text read as those tokens), else text of the layout or the client's, read as plain text. */
interface Piece {
  text: string;
  special?: true;
}

/** Generates the middle; the deltas are the completion task's. The prompt text is handed to `onPrompt` before generation starts. */
export async function* infill(engine: Engine, request: InfillRequest, signal: AbortSignal, onPrompt?: (prompt: string) => void): AsyncIterable<ChatDelta> {
  const installed = await engine.resolve(request.model, ['chat']);
  const prompt = await infillPrompt(engine, installed, request);
  onPrompt?.(prompt.text);
  const { inputPrefix: _p, inputSuffix: _s, prompt: _t, extra: _e, ...sampling } = request;
  yield* complete(engine, { ...sampling, model: installed.id, prompt: prompt.text, promptTokens: prompt.tokens }, signal);
}

/** The prompt of an infill request on its model (the layout above): its tokens, and their text. */
export async function infillPrompt(engine: Engine, installed: InstalledModel, request: InfillRequest): Promise<{ text: string; tokens: number[] }> {
  const file = ggufFileOf(installed);
  const declared = (file === undefined ? undefined : await vocabSpecials(file))?.fim ?? {};
  return engine.withModel<ChatModel, { text: string; tokens: number[] }>(
    installed.id,
    ['chat'],
    async (model) => {
      const tokenize = model.tokenize?.bind(model);
      const detokenize = model.detokenize?.bind(model);
      if (!tokenize || !detokenize) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not expose its tokens, which filling in the middle needs.`);
      const fim = await fimTexts(tokenize, detokenize, declared);
      if (fim.pre === undefined || fim.suf === undefined || fim.mid === undefined) {
        throw new UnsupportedError(
          `Model '${installed.id}' has no fill-in-the-middle tokens (its vocabulary has no FIM prefix, suffix and middle token): /infill needs a code model that has them, such as Qwen2.5-Coder or CodeLlama.`,
          { param: 'input_suffix', code: 'fim_unsupported' },
        );
      }
      const token = (text: string): Piece => ({ text, special: true });
      const pieces: Piece[] = [];
      if (fim.rep !== undefined) pieces.push(token(fim.rep), { text: REPO_NAME });
      for (const chunk of request.extra) {
        if (fim.sep !== undefined) pieces.push(token(fim.sep), { text: `${chunk.filename}\n` });
        else pieces.push({ text: SNIPPET_SEPARATOR });
        pieces.push({ text: chunk.text });
      }
      if (fim.sep !== undefined) pieces.push(token(fim.sep), { text: CURRENT_FILE });
      pieces.push(token(fim.pre), { text: request.inputPrefix }, { text: request.prompt, special: true });
      pieces.push(token(fim.suf), { text: request.inputSuffix }, token(fim.mid));
      const tokens = (await Promise.all(pieces.map((p) => (p.text === '' ? [] : tokenize(p.text, p.special === true))))).flat();
      return { text: await detokenize(tokens), tokens };
    },
    { keepAliveMs: request.keepAliveMs },
  );
}

/**
 * The text of each FIM token the model has: the id its GGUF declares, else
 * the token whose text is one llama.cpp looks for. A token is used only if
 * its text reads back as that one token.
 */
async function fimTexts(
  tokenize: (text: string, parseSpecial?: boolean) => Promise<number[]>,
  detokenize: (ids: readonly number[]) => Promise<string>,
  declared: Partial<Record<FimRole, number>>,
): Promise<Partial<Record<FimRole, string>>> {
  const roles = Object.keys(FIM_TEXTS) as FimRole[];
  const found = await Promise.all(
    roles.map(async (role): Promise<string | undefined> => {
      const id = declared[role];
      if (id !== undefined) {
        const text = await detokenize([id]).catch(() => undefined);
        return text !== undefined && sameTokens(await tokenize(text), [id]) ? text : undefined;
      }
      const candidates = await Promise.all(FIM_TEXTS[role].map(async (text) => ((await tokenize(text)).length === 1 ? text : undefined)));
      return candidates.find((text) => text !== undefined);
    }),
  );
  return Object.fromEntries(roles.flatMap((role, i) => (found[i] === undefined ? [] : [[role, found[i]]])));
}

function sameTokens(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((t, i) => t === b[i]);
}
