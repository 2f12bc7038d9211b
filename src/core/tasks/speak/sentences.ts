/**
 * Long input is synthesised piece by piece so the first audio leaves after
 * the first sentence, not after the whole text, and so an autoregressive
 * model never runs into its frame limit. Pieces end at sentence boundaries
 * (Latin and CJK punctuation, line breaks); sentences shorter than
 * `minChars` are joined with the next one (a lone "Hi." sounds clipped), and
 * a sentence longer than `maxChars` is cut at the last clause boundary
 * (comma, semicolon, colon, dash) or space before the limit.
 */

export interface SplitOptions {
  minChars?: number;
  maxChars?: number;
}

const SENTENCE_END = /[.!?…。！？](?:["'”’」』)\]]*)(?=\s|$)|[。！？]+|\n+/g;
const CLAUSE_END = /[,;:，；：、—–]\s*/g;
const SPACE = /\s+/g;

export function splitSentences(text: string, options: SplitOptions = {}): string[] {
  const minChars = options.minChars ?? 24;
  const maxChars = options.maxChars ?? 300;
  const sentences: string[] = [];
  let start = 0;
  for (const match of text.matchAll(SENTENCE_END)) {
    const end = match.index + match[0].length;
    sentences.push(text.slice(start, end));
    start = end;
  }
  sentences.push(text.slice(start));

  const pieces: string[] = [];
  let pending = '';
  for (const sentence of sentences) {
    pending += sentence;
    if (pending.trim().length >= minChars) {
      pieces.push(...cut(pending.trim(), maxChars));
      pending = '';
    }
  }
  if (pending.trim()) {
    // A short tail joins the last piece when that keeps it under the limit.
    const last = pieces.at(-1);
    if (last !== undefined && last.length + pending.length <= maxChars) pieces[pieces.length - 1] = `${last} ${pending.trim()}`;
    else pieces.push(...cut(pending.trim(), maxChars));
  }
  return pieces;
}

/** Cuts one over-long sentence at clause boundaries, else spaces, else hard at the limit. */
function cut(sentence: string, maxChars: number): string[] {
  const out: string[] = [];
  let rest = sentence;
  while (rest.length > maxChars) {
    const head = rest.slice(0, maxChars + 1);
    // A clause boundary in the second half of the window, else the last space, else a hard cut.
    let at = lastEnd(head, CLAUSE_END, maxChars);
    if (at < maxChars / 2) at = lastEnd(head, SPACE, maxChars);
    if (at === 0) at = maxChars;
    out.push(rest.slice(0, at).trim());
    rest = rest.slice(at).trim();
  }
  if (rest) out.push(rest);
  return out;
}

function lastEnd(text: string, pattern: RegExp, limit: number): number {
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    const end = match.index + match[0].length;
    if (end <= limit) at = end;
  }
  return at;
}
