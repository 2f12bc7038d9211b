/**
 * Long input is synthesised piece by piece so the first audio leaves after
 * the first sentence, not after the whole text, and so an autoregressive
 * model never runs into its frame limit. Pieces end at sentence boundaries
 * (Latin and CJK punctuation, line breaks); sentences shorter than
 * `minChars` are joined with the next one (a lone "Hi." sounds clipped), and
 * a sentence longer than `maxChars` is cut at the last clause boundary
 * (comma, semicolon, colon, dash) or space before the limit. A model whose
 * prosody spans sentences (Qwen3-TTS) takes the whole text instead, or
 * pieces of as many whole sentences as fit its one-pass length
 * (packSentences).
 */

export interface SplitOptions {
  minChars?: number;
  maxChars?: number;
}

const SENTENCE_END = /[.!?…。！？](?:["'”’」』)\]]*)(?=\s|$)|[。！？]+|\n+/g;
const CLAUSE_END = /[,;:，；：、—–]\s*/g;
const SPACE = /\s+/g;

/** The text cut after each sentence end, every character kept (spaces stay at the start of the next sentence). */
function sentencesOf(text: string): string[] {
  const sentences: string[] = [];
  let start = 0;
  for (const match of text.matchAll(SENTENCE_END)) {
    const end = match.index + match[0].length;
    sentences.push(text.slice(start, end));
    start = end;
  }
  sentences.push(text.slice(start));
  return sentences;
}

export function splitSentences(text: string, options: SplitOptions = {}): string[] {
  const minChars = options.minChars ?? 24;
  const maxChars = options.maxChars ?? 300;
  const sentences = sentencesOf(text);

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

/**
 * For a model that speaks a whole text in one pass: the whole text when it
 * has at most `maxChars` characters; otherwise consecutive sentences packed
 * into pieces of at most `maxChars` (as written, line breaks included); a
 * sentence longer than that is cut as splitSentences cuts it, its last part
 * packed with the sentences after it.
 */
export function packSentences(text: string, maxChars: number): string[] {
  const whole = text.trim();
  if (whole.length <= maxChars) return whole ? [whole] : [];
  const pieces: string[] = [];
  let pending = '';
  const flush = () => {
    if (pending.trim()) pieces.push(pending.trim());
    pending = '';
  };
  for (const sentence of sentencesOf(text)) {
    if ((pending + sentence).trim().length <= maxChars) {
      pending += sentence;
      continue;
    }
    flush();
    if (sentence.trim().length <= maxChars) {
      pending = sentence;
      continue;
    }
    // Its last part may take the next sentences in.
    const parts = cut(sentence.trim(), maxChars);
    pieces.push(...parts.slice(0, -1));
    pending = parts.at(-1)!;
  }
  flush();
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

/**
 * Sentences of text that arrives in pieces (a chat reply streaming in), for
 * speaking each as soon as it is complete: `push` returns the pieces that
 * are whole now, `end` the rest. A sentence end counts once text follows it
 * ("3." may still become "3.14"); later pieces are joined up to `minChars`
 * as splitSentences joins them.
 *
 * The first piece decides when the first audio leaves, so it may be short
 * (`firstMinChars`), may end at a clause (a comma, a colon…) once it has
 * that many characters, and with `firstWordsChars` ends at the first space
 * from that length on when no boundary came first, the moment the word
 * before it is complete (a run of that length and as long again without a
 * space is cut there): a voice answer then starts speaking after its first
 * clause or few words, not its first full stop.
 */
export interface SentenceStreamOptions extends SplitOptions {
  firstMinChars?: number;
  firstWordsChars?: number;
}

export class SentenceStream {
  private pending = '';
  private first = true;

  constructor(private readonly options: SentenceStreamOptions = {}) {}

  push(text: string): string[] {
    this.pending += text;
    const pieces: string[] = [];
    for (;;) {
      const end = this.nextEnd();
      if (end === undefined) break;
      const piece = this.pending.slice(0, end).trim();
      this.pending = this.pending.slice(end);
      if (!piece) continue;
      pieces.push(...cut(piece, this.options.maxChars ?? 300));
      this.first = false;
    }
    return pieces;
  }

  end(): string[] {
    const rest = this.pending.trim();
    this.pending = '';
    return rest ? cut(rest, this.options.maxChars ?? 300) : [];
  }

  /** Where the next piece ends: after the first sentence end (for the first piece, also clause end), followed by more text, that leaves it long enough. */
  private nextEnd(): number | undefined {
    const min = this.first ? (this.options.firstMinChars ?? 1) : (this.options.minChars ?? 24);
    const ends = this.first ? [SENTENCE_END, CLAUSE_END] : [SENTENCE_END];
    const candidates = ends.flatMap((pattern) => [...this.pending.matchAll(pattern)].map((m) => m.index + m[0].length)).sort((a, b) => a - b);
    for (const end of candidates) {
      if (end >= this.pending.length) break;
      if (this.pending.slice(0, end).trim().length >= min) return end;
    }
    const words = this.options.firstWordsChars;
    if (this.first && words !== undefined && this.pending.trimStart().length >= words) {
      const from = this.pending.length - this.pending.trimStart().length + words;
      const space = this.pending.slice(from).search(/\s/);
      if (space >= 0) return from + space + 1;
      if (this.pending.length - from >= words) return this.pending.length;
    }
    // No end yet: a piece that outgrew the limit is cut where splitSentences would cut it.
    const max = this.options.maxChars ?? 300;
    if (this.pending.length > max * 2) return lastEnd(this.pending.slice(0, max + 1), SPACE, max) || max;
    return undefined;
  }
}
