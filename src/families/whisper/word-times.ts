import type { Word } from '../../core/tasks/transcribe/transcriber.js';
import type { AttentionRows } from './decode.js';
import { TIME_PRECISION } from './segments.js';

/**
 * Word timestamps from Whisper's cross-attention (openai/whisper's timing.py,
 * as transformers.js runs it on the "_timestamped" exports): the alignment
 * heads' attention of every decoded position over the encoder frames is
 * normalised per head (mean and standard deviation over the positions, per
 * frame), median-filtered along the frames and averaged over the heads; the
 * cheapest monotonic path through its negation (dynamic time warping) gives
 * the frame where each position starts. Tokens are grouped into words — at
 * spaces and punctuation, or at every complete character for languages
 * written without spaces — and punctuation joins its neighbouring word.
 */

export type { Word } from '../../core/tasks/transcribe/transcriber.js';

export type { AttentionRows } from './decode.js';

/** openai/whisper's default median filter width over the frames (config.json median_filter_width). */
export const MEDIAN_FILTER_WIDTH = 7;
/** Punctuation openai/whisper joins to the following word, and to the preceding one. */
const PREPENDED = `"'“¿([{-`;
const APPENDED = `"'.。,，!！?？:：”)]}、`;
/** Python's string.punctuation: a subword made of one of these starts a word of its own. */
const ASCII_PUNCTUATION = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
/** Rows normalised and filtered between two yields to the event loop (a few ms of work at 1500 frames). */
const ROWS_PER_SLICE = 32;
/** Languages written without spaces between words: split at every complete character instead. */
const UNSPACED = new Set(['zh', 'ja', 'th', 'lo', 'my', 'yue']);

/**
 * Median over a sliding window of odd `width`, the edges reflected (x[-1] =
 * x[1]), as torch's reflect padding does; returned unfiltered when it is not
 * longer than half the window (nothing to reflect).
 */
export function medianFilter(values: ArrayLike<number>, width: number, out = new Float32Array(values.length)): Float32Array {
  if (width < 1 || width % 2 === 0) throw new RangeError(`median filter width must be odd and positive, got ${width}`);
  const n = values.length;
  const half = (width - 1) / 2;
  if (n <= half) {
    for (let i = 0; i < n; i++) out[i] = values[i]!;
    return out;
  }
  const window = new Float64Array(width);
  for (let i = 0; i < n; i++) {
    // Every model's width is 7, and this runs for every frame of every row of every alignment head
    // (≈ 2.7 M medians for a full window of whisper-base): a selection network away from the edges.
    out[i] =
      width === 7 && i >= 3 && i < n - 3
        ? median7(values[i - 3]!, values[i - 2]!, values[i - 1]!, values[i]!, values[i + 1]!, values[i + 2]!, values[i + 3]!)
        : reflectedMedian(values, i, half, window);
  }
  return out;
}

/** The median of the window of `values` centred on `i`, reflected at the edges, by insertion sort into `window`. */
function reflectedMedian(values: ArrayLike<number>, i: number, half: number, window: Float64Array): number {
  const n = values.length;
  for (let k = 0; k < window.length; k++) {
    let index = i + k - half;
    if (index < 0) index = -index;
    else if (index >= n) index = 2 * (n - 1) - index;
    const v = values[index]!;
    let j = k;
    while (j > 0 && window[j - 1]! > v) {
      window[j] = window[j - 1]!;
      j--;
    }
    window[j] = v;
  }
  return window[half]!;
}

/**
 * The median of seven values: a 13-comparator selection network (Paeth's, as
 * in Devillard's "fast median search"), branch-free min/max pairs.
 */
function median7(a: number, b: number, c: number, d: number, e: number, f: number, g: number): number {
  let t: number;
  t = Math.min(a, f); f = Math.max(a, f); a = t;
  t = Math.min(a, d); d = Math.max(a, d); a = t;
  t = Math.min(b, g); g = Math.max(b, g); b = t;
  t = Math.min(c, e); e = Math.max(c, e); c = t;
  b = Math.max(a, b);
  t = Math.min(d, f); f = Math.max(d, f); d = t;
  t = Math.min(c, g); g = Math.max(c, g); c = t;
  d = Math.max(c, d);
  d = Math.min(d, g);
  e = Math.min(e, f);
  t = Math.min(b, e); e = Math.max(b, e); b = t;
  d = Math.max(b, d);
  return Math.min(d, e);
}

/**
 * The cheapest monotonic path through a `rows` × `cols` cost matrix (row
 * major) from its first cell to its last, each step one frame on (diagonal),
 * one row down, or one frame on in the same row — openai/whisper's DTW,
 * including its tie rule (a step that is not strictly the cheapest goes
 * along the frames). Returns the path's cells in order.
 */
export function dynamicTimeWarping(cost: ArrayLike<number>, rows: number, cols: number): { rows: Int32Array; cols: Int32Array } {
  if (rows < 1 || cols < 1) return { rows: new Int32Array(0), cols: new Int32Array(0) };
  const width = cols + 1;
  const total = new Float64Array((rows + 1) * width).fill(Infinity);
  const trace = new Uint8Array((rows + 1) * width);
  total[0] = 0;
  for (let j = 1; j <= cols; j++) {
    for (let i = 1; i <= rows; i++) {
      const diagonal = total[(i - 1) * width + j - 1]!;
      const down = total[(i - 1) * width + j]!;
      const along = total[i * width + j - 1]!;
      let best = along;
      let step = 2;
      if (diagonal < down && diagonal < along) {
        best = diagonal;
        step = 0;
      } else if (down < diagonal && down < along) {
        best = down;
        step = 1;
      }
      total[i * width + j] = cost[(i - 1) * cols + j - 1]! + best;
      trace[i * width + j] = step;
    }
  }
  const pathRows: number[] = [];
  const pathCols: number[] = [];
  let i = rows;
  let j = cols;
  while (i > 0 || j > 0) {
    pathRows.push(i - 1);
    pathCols.push(j - 1);
    // Along the edges only one way leads back to the first cell.
    const step = i === 0 ? 2 : j === 0 ? 1 : trace[i * width + j]!;
    if (step === 0) {
      i--;
      j--;
    } else if (step === 1) i--;
    else j--;
  }
  return { rows: Int32Array.from(pathRows.reverse()), cols: Int32Array.from(pathCols.reverse()) };
}

/**
 * The encoder frame at which each decoded position starts, from the
 * alignment heads' attention over the first `frames` frames; one more entry,
 * `frames`, closes the last position. Rows are processed a slice at a time
 * with `pause()` between slices, so a long window never holds the event loop.
 */
export async function alignPositions(attention: AttentionRows, frames: number, filterWidth = MEDIAN_FILTER_WIDTH, pause: () => Promise<void> = nextTurn): Promise<Int32Array> {
  const rows = attention.length;
  const heads = attention[0]?.length ?? 0;
  const starts = new Int32Array(rows + 1).fill(frames);
  if (rows === 0 || heads === 0 || frames < 1) return starts;
  const matrix = new Float32Array(rows * frames);
  const mean = new Float64Array(frames);
  const std = new Float64Array(frames);
  const normalised = new Float32Array(frames);
  const filtered = new Float32Array(frames);
  for (let h = 0; h < heads; h++) {
    mean.fill(0);
    std.fill(0);
    for (let r = 0; r < rows; r++) {
      const row = attention[r]![h]!;
      for (let c = 0; c < frames; c++) mean[c] += row[c]!;
    }
    for (let c = 0; c < frames; c++) mean[c] /= rows;
    for (let r = 0; r < rows; r++) {
      const row = attention[r]![h]!;
      for (let c = 0; c < frames; c++) std[c] += (row[c]! - mean[c]!) ** 2;
    }
    // Population deviation; a frame every position attends to alike carries no timing (0, not NaN).
    for (let c = 0; c < frames; c++) std[c] = Math.sqrt(std[c]! / rows);
    for (let r = 0; r < rows; r++) {
      const row = attention[r]![h]!;
      for (let c = 0; c < frames; c++) normalised[c] = std[c]! > 0 ? (row[c]! - mean[c]!) / std[c]! : 0;
      medianFilter(normalised, filterWidth, filtered);
      const offset = r * frames;
      for (let c = 0; c < frames; c++) matrix[offset + c] -= filtered[c]! / heads;
      if (r % ROWS_PER_SLICE === ROWS_PER_SLICE - 1) await pause();
    }
    await pause();
  }
  // `matrix` holds the negated mean: the path that attends most is the cheapest.
  const path = dynamicTimeWarping(matrix, rows, frames);
  for (let k = path.rows.length - 1; k >= 0; k--) starts[path.rows[k]!] = path.cols[k]!;
  return starts;
}

/**
 * Text tokens grouped into words, as ranges [from, to) of `tokens` with their
 * text (openai/whisper's split_to_word_tokens): first into the shortest runs
 * that decode to whole characters; then, for languages with spaces, a run
 * joins the previous word unless it starts with a space or is punctuation.
 */
export function splitWords(tokens: readonly number[], decode: (tokens: readonly number[]) => string, language: string): Array<{ word: string; from: number; to: number }> {
  const characters = splitOnCharacters(tokens, decode);
  if (UNSPACED.has(language)) return characters;
  const words: Array<{ word: string; from: number; to: number }> = [];
  for (const piece of characters) {
    const previous = words.at(-1);
    if (!previous || piece.word.startsWith(' ') || ASCII_PUNCTUATION.includes(piece.word.trim())) words.push({ ...piece });
    else {
      previous.word += piece.word;
      previous.to = piece.to;
    }
  }
  return words;
}

/**
 * The shortest runs of tokens that decode without a broken character (a
 * byte-level BPE token may hold part of one): a replacement character ends a
 * run only where the whole text has one too. An incomplete run at the end is
 * kept as it decodes.
 */
function splitOnCharacters(tokens: readonly number[], decode: (tokens: readonly number[]) => string): Array<{ word: string; from: number; to: number }> {
  const full = decode(tokens);
  const out: Array<{ word: string; from: number; to: number }> = [];
  let from = 0;
  let offset = 0;
  for (let i = 0; i < tokens.length; i++) {
    const text = decode(tokens.slice(from, i + 1));
    const broken = text.indexOf('\ufffd');
    if (broken < 0 || full[offset + broken] === '\ufffd') {
      out.push({ word: text, from, to: i + 1 });
      from = i + 1;
      offset += text.length;
    }
  }
  if (from < tokens.length) out.push({ word: decode(tokens.slice(from)), from, to: tokens.length });
  return out;
}

/**
 * Joins punctuation to its neighbours, in place (openai/whisper's
 * merge_punctuations): an opening mark or a bare space after a space-led
 * word goes to the next word, which keeps its times; a closing mark goes to
 * the previous word unless that ends with a space. Joined words are left
 * empty.
 */
export function mergePunctuation(words: Array<{ word: string }>): void {
  for (let i = words.length - 2, j = words.length - 1; i >= 0; i--) {
    const previous = words[i]!;
    if (previous.word.startsWith(' ') && PREPENDED.includes(previous.word.trim())) {
      words[j]!.word = previous.word + words[j]!.word;
      previous.word = '';
    } else j = i;
  }
  for (let i = 0, j = 1; j < words.length; j++) {
    const previous = words[i]!;
    const following = words[j]!;
    // An empty word is "in" the marks too, as in Python: it is passed over, keeping `previous`.
    if (!previous.word.endsWith(' ') && APPENDED.includes(following.word)) {
      previous.word += following.word;
      following.word = '';
    } else i = j;
  }
}

export interface SpanForWords {
  /** The segment's text tokens, in the order decoded. */
  tokens: readonly number[];
  /** Segment bounds in seconds: its words are kept inside them. */
  start: number;
  end: number;
}

export interface WindowForWords {
  /** Every token the window decoded (timestamps included), in order. */
  decoded: readonly number[];
  attention: AttentionRows;
  /** Encoder frames holding audio (half the window's mel frames). */
  frames: number;
  /** Seconds at which the window starts. */
  offset: number;
  /** Every segment cut from it, in order (empty ones too): together their text tokens begin the window's text tokens. */
  spans: readonly SpanForWords[];
  timestampBegin: number;
  language: string;
  filterWidth?: number;
  /** End of the previous window's last word: words never go back in time. */
  after?: number;
}

/**
 * One window's words, per segment: each word starts where its first token's
 * position starts and ends where the position after its last token starts
 * (the next token, often a timestamp, or the end of text), then is kept
 * within its segment and after the previous word; times in seconds, to the
 * millisecond, words without surrounding spaces.
 */
export async function windowWords(window: WindowForWords, decode: (tokens: readonly number[]) => string): Promise<Word[][]> {
  const starts = await alignPositions(window.attention, window.frames, window.filterWidth);
  const rows = starts.length - 1;
  const time = (position: number) => window.offset + starts[Math.min(position, rows)]! * TIME_PRECISION;
  // Positions of the text tokens among the decoded ones: the spans hold them in order, from the first.
  const textPositions: number[] = [];
  window.decoded.forEach((token, position) => token < window.timestampBegin && textPositions.push(position));
  let next = 0;
  const result: Word[][] = [];
  let floor = window.after ?? -Infinity;
  for (const span of window.spans) {
    const positions = span.tokens.map(() => textPositions[next++] ?? window.decoded.length);
    const words = splitWords(span.tokens, decode, window.language).map((w) => ({ word: w.word, start: time(positions[w.from]!), end: time(positions[w.to - 1]! + 1) }));
    mergePunctuation(words);
    const high = span.end;
    const low = Math.min(span.start, high);
    const out: Word[] = [];
    for (const w of words) {
      const text = w.word.trim();
      if (text === '') continue;
      const start = Math.max(clamp(w.start, low, high), floor);
      const end = Math.max(clamp(w.end, low, high), start);
      out.push({ word: text, start: round(start), end: round(end) });
      floor = end;
    }
    result.push(out);
  }
  return result;
}

function clamp(value: number, low: number, high: number): number {
  return Math.min(Math.max(value, low), high);
}

function round(seconds: number): number {
  return Math.round(seconds * 1000) / 1000;
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
