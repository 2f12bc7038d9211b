import type { Engine } from '../engine.js';
import { UnsupportedError } from '../errors.js';
import { vocabSpecials, type FimRole } from '../gguf-vocab.js';
import type { InstalledModel } from '../store.js';
import type { ChatDelta, ChatModel, CompletionRequest } from './chat.js';
import { complete } from './complete.js';
import { ggufFileOf, spellsSpecialToken } from './tokenize.js';

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
 * The prompt goes to the completion task as one text with the special
 * tokens spelled out, which the model reads as those tokens. llama.cpp
 * tokenizes each piece on its own and reads special tokens' text in the
 * prefix, suffix and chunks as plain text; here a piece that spells one is
 * a 400 naming its field, and the token count of the whole is checked
 * against the pieces' (docs/api.md says where the two can differ).
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

/** One piece of the prompt: a FIM token's text, text of the layout, or the client's (`param` names its field). */
interface Piece {
  text: string;
  token?: true;
  param?: string;
  /** The client's `prompt`: special tokens read as such, as llama.cpp reads it too. */
  parsed?: true;
}

/** Generates the middle; the deltas are the completion task's. The prompt text is handed to `onPrompt` before generation starts. */
export async function* infill(engine: Engine, request: InfillRequest, signal: AbortSignal, onPrompt?: (prompt: string) => void): AsyncIterable<ChatDelta> {
  const installed = await engine.resolve(request.model, ['chat']);
  const prompt = await infillPrompt(engine, installed, request);
  onPrompt?.(prompt);
  const { inputPrefix: _p, inputSuffix: _s, prompt: _t, extra: _e, ...sampling } = request;
  yield* complete(engine, { ...sampling, model: installed.id, prompt }, signal);
}

/** The prompt text of an infill request on its model (the layout above). */
export async function infillPrompt(engine: Engine, installed: InstalledModel, request: InfillRequest): Promise<string> {
  const file = ggufFileOf(installed);
  const declared = (file === undefined ? undefined : await vocabSpecials(file))?.fim ?? {};
  return engine.withModel<ChatModel, string>(
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
      const token = (text: string): Piece => ({ text, token: true });
      const pieces: Piece[] = [];
      if (fim.rep !== undefined) pieces.push(token(fim.rep), { text: REPO_NAME });
      request.extra.forEach((chunk, i) => {
        if (fim.sep !== undefined) pieces.push(token(fim.sep), { text: `${chunk.filename}\n`, param: `input_extra.${i}.filename` });
        else pieces.push({ text: SNIPPET_SEPARATOR });
        pieces.push({ text: chunk.text, param: `input_extra.${i}.text` });
      });
      if (fim.sep !== undefined) pieces.push(token(fim.sep), { text: CURRENT_FILE });
      pieces.push(token(fim.pre), { text: request.inputPrefix, param: 'input_prefix' }, { text: request.prompt, param: 'prompt', parsed: true });
      pieces.push(token(fim.suf), { text: request.inputSuffix, param: 'input_suffix' }, token(fim.mid));
      const text = pieces.map((p) => p.text).join('');

      // The whole, tokenized as the model will, against its pieces tokenized one by one (as llama.cpp does).
      const plain = pieces.filter((p) => !p.token && !p.parsed && p.text !== '');
      const [whole, counts, typed] = await Promise.all([tokenize(text), model.tokenCounts(plain.map((p) => p.text)), request.prompt ? tokenize(request.prompt) : []]);
      const expected = pieces.filter((p) => p.token).length + counts.reduce((a, b) => a + b, 0) + typed.length;
      if (whole.length !== expected) {
        // A piece that spells a special token reads as more tokens as plain text (llama.cpp's reading) than here; else two pieces merely joined into one token.
        const own = await Promise.all(plain.map((p) => (p.param ? tokenize(p.text) : Promise.resolve(undefined))));
        const spelled = plain.findIndex((p, i) => own[i] !== undefined && own[i].length !== counts[i]);
        if (spelled >= 0) throw spellsSpecialToken(installed.id, plain[spelled]!.param!);
      }
      return text;
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
  tokenize: (text: string) => Promise<number[]>,
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
