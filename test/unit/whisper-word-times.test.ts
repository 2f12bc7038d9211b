import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxSession, type Feed, type Tensor } from '../../src/runtimes/onnx/session.js';
import { attentionLayers } from '../../src/families/whisper/model.js';
import { alignPositions, dynamicTimeWarping, medianFilter, mergePunctuation, splitWords, windowWords } from '../../src/families/whisper/word-times.js';
import { TINY_WHISPER, WHISPER_FILES, WHISPER_TOKENS, tinyWhisperTimestampedModel, whisperDecoderOutputNames } from '../fixtures/onnx/whisper.js';

/**
 * Word timestamps from cross-attention: the median filter, DTW, alignment of
 * decoded positions to frames, grouping tokens into words (space-separated
 * and unspaced languages), punctuation, and the timestamped fixture's
 * cross_attentions outputs that feed them.
 */

describe('medianFilter', () => {
  it('takes the median of each window, reflecting at the edges', () => {
    // i=0 sees [x1, x0, x1] = [9, 1, 9]; i=4 sees [x3, x4, x3] = [8, 3, 8].
    expect([...medianFilter([1, 9, 2, 8, 3], 3)]).toEqual([9, 2, 8, 3, 8]);
    // A one-frame spike vanishes under width 7.
    expect([...medianFilter([0, 0, 0, 10, 0, 0, 0, 0], 7)]).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it('agrees with sorting every window, at width 7 (its fast path) and others, on every 0/1 pattern and on random rows with ties', () => {
    const naive = (values: number[], width: number) =>
      values.map((_, i) => {
        const half = (width - 1) / 2;
        const window = Array.from({ length: width }, (_, k) => {
          let j = i + k - half;
          if (j < 0) j = -j;
          else if (j >= values.length) j = 2 * (values.length - 1) - j;
          return values[j]!;
        });
        return window.sort((a, b) => a - b)[half]!;
      });
    // The 0-1 principle: a comparator network that selects the median of every 0/1 input selects it of any.
    for (let bits = 0; bits < 128; bits++) {
      const values = Array.from({ length: 7 }, (_, k) => (bits >> k) & 1);
      expect([...medianFilter([0, 0, 0, ...values, 1, 1, 1], 7)].slice(3, 10)).toEqual(naive([0, 0, 0, ...values, 1, 1, 1], 7).slice(3, 10));
    }
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % 9) - 4;
    for (const width of [1, 3, 5, 7, 9]) {
      for (const length of [4, 6, 7, 8, 30]) {
        const values = Array.from({ length }, random);
        if (length > (width - 1) / 2) expect([...medianFilter(values, width)]).toEqual(naive(values, width));
      }
    }
  });

  it('leaves a row no longer than half the window as it is, and refuses an even width', () => {
    expect([...medianFilter([5, 1, 4], 7)]).toEqual([5, 1, 4]);
    expect(() => medianFilter([1, 2, 3], 4)).toThrow(/odd/);
  });
});

describe('dynamicTimeWarping', () => {
  it('follows a cheap diagonal', () => {
    const cost = [0, 1, 1, 1, 0, 1, 1, 1, 0];
    const path = dynamicTimeWarping(cost, 3, 3);
    expect([...path.rows]).toEqual([0, 1, 2]);
    expect([...path.cols]).toEqual([0, 1, 2]);
  });

  it('stays on a row while its frames are cheap, then moves on', () => {
    // Row 0 is cheap on frames 0–1, row 1 on frames 2–4.
    const cost = [0, 0, 5, 5, 5, 5, 5, 0, 0, 0];
    const path = dynamicTimeWarping(cost, 2, 5);
    expect([...path.rows]).toEqual([0, 0, 1, 1, 1]);
    expect([...path.cols]).toEqual([0, 1, 2, 3, 4]);
  });

  it('sends ties along the frames, as openai/whisper does', () => {
    // All free: at the last cell the three ways tie and the step along the frames wins.
    const path = dynamicTimeWarping([0, 0, 0, 0], 2, 2);
    expect([...path.rows]).toEqual([0, 1, 1]);
    expect([...path.cols]).toEqual([0, 0, 1]);
  });

  it('gives every row at least one cell when there are more rows than frames', () => {
    const path = dynamicTimeWarping(new Array(8).fill(0), 4, 2);
    expect(new Set(path.rows).size).toBe(4);
    expect(path.rows.at(-1)).toBe(3);
    expect(path.cols.at(-1)).toBe(1);
  });
});

/** Attention of `rows` positions over `frames` frames, each position on its own block of `block` frames, for `heads` heads. */
function blockAttention(rows: number, frames: number, block: number, heads = 2): Float32Array[][] {
  return Array.from({ length: rows }, (_, r) =>
    Array.from({ length: heads }, (_, h) => {
      const row = new Float32Array(frames).fill(0.001);
      for (let c = r * block; c < Math.min(frames, (r + 1) * block); c++) row[c] = 0.05 + 0.01 * h;
      return row;
    }),
  );
}

const noPause = () => Promise.resolve();

describe('alignPositions', () => {
  it('puts each position where its attention is: known diagonal blocks → known starts', async () => {
    const starts = await alignPositions(blockAttention(4, 40, 10), 40, 7, noPause);
    expect([...starts]).toEqual([0, 10, 20, 30, 40]);
  });

  it('only looks at the frames that hold audio', async () => {
    // 100 frames of attention; the 60 past the audio are poison that must not be read.
    const attention = blockAttention(4, 100, 10);
    for (const heads of attention) for (const row of heads) row.fill(NaN, 40);
    const starts = await alignPositions(attention, 40, 7, noPause);
    expect([...starts]).toEqual([0, 10, 20, 30, 40]);
  });

  it('copes with one position (no spread to normalise by) and with none', async () => {
    const one = await alignPositions(blockAttention(1, 20, 20), 20, 7, noPause);
    expect([...one]).toEqual([0, 20]);
    expect([...(await alignPositions([], 20))]).toEqual([20]);
  });
});

/** A byte-level vocabulary: each token is some bytes; decoding joins them as UTF-8 (broken characters → U+FFFD), as a byte-level BPE does. */
function byteVocabulary(tokens: Array<string | number[]>): (ids: readonly number[]) => string {
  const bytes = tokens.map((t) => (typeof t === 'string' ? [...new TextEncoder().encode(t)] : t));
  return (ids) => new TextDecoder().decode(Uint8Array.from(ids.flatMap((id) => bytes[id]!)));
}

const NI = [...new TextEncoder().encode('你')]; // three bytes
const VOCAB = [' Hello', ',', ' wor', 'ld', '!', ' "', ' yes', '"', NI.slice(0, 2), NI.slice(2), '好', ' ', [0xff], '。'];
const decode = byteVocabulary(VOCAB);

describe('splitWords', () => {
  it('splits a space-separated language at spaces and punctuation', () => {
    const words = splitWords([0, 1, 2, 3, 4], decode, 'en');
    expect(words).toEqual([
      { word: ' Hello', from: 0, to: 1 },
      { word: ',', from: 1, to: 2 },
      { word: ' world', from: 2, to: 4 },
      { word: '!', from: 4, to: 5 },
    ]);
  });

  it('splits an unspaced language at every whole character, never inside one', () => {
    // "你" spans tokens 8 and 9: neither alone is a character.
    expect(splitWords([11, 8, 9, 10, 13], decode, 'zh').map((w) => w.word)).toEqual([' ', '你', '好', '。']);
    expect(splitWords([11, 8, 9, 10, 13], decode, 'zh')[1]).toEqual({ word: '你', from: 1, to: 3 });
    expect(splitWords([8, 9, 10], decode, 'ja').map((w) => w.word)).toEqual(['你', '好']);
    // The same tokens as English: one word, as there is no space between them.
    expect(splitWords([11, 8, 9, 10], decode, 'en').map((w) => w.word)).toEqual([' 你好']);
  });

  it('keeps a byte that is no character as a word of its own, and an unfinished character at the end', () => {
    expect(splitWords([12, 10], decode, 'zh').map((w) => w.word)).toEqual(['\ufffd', '好']);
    expect(splitWords([10, 8], decode, 'zh')).toEqual([
      { word: '好', from: 0, to: 1 },
      { word: '\ufffd', from: 1, to: 2 },
    ]);
  });
});

describe('mergePunctuation', () => {
  it('joins closing marks to the previous word and opening marks to the next', () => {
    const words = [' Hello', ',', ' world', '!'].map((word) => ({ word }));
    mergePunctuation(words);
    expect(words.map((w) => w.word)).toEqual([' Hello,', '', ' world!', '']);
    const quoted = [' (', ' yes', ')', '.'].map((word) => ({ word }));
    mergePunctuation(quoted);
    expect(quoted.map((w) => w.word)).toEqual(['', ' ( yes).', '', '']);
  });

  it('joins a bare space to the following character (unspaced languages)', () => {
    const words = [' ', '你', '好', '。'].map((word) => ({ word }));
    mergePunctuation(words);
    expect(words.map((w) => w.word)).toEqual(['', ' 你', '好。', '']);
  });

  it('leaves a mark after a word that ends with a space alone', () => {
    const words = [' a ', '.'].map((word) => ({ word }));
    mergePunctuation(words);
    expect(words.map((w) => w.word)).toEqual([' a ', '.']);
  });
});

describe('windowWords', () => {
  const TS = 1000; // first timestamp token in this vocabulary
  // <|0.00|> " Hello" "," " wor" "ld" <|1.00|>, then the end of text: one attention row per decoded token, one more for the end.
  const decoded = [TS, 0, 1, 2, 3, TS + 50];
  const window = {
    decoded,
    attention: blockAttention(decoded.length + 1, 70, 10),
    frames: 70,
    offset: 0,
    spans: [{ tokens: [0, 1, 2, 3], start: 0, end: 1 }],
    timestampBegin: TS,
    language: 'en',
  };

  it('times each word from its first token to the token after its last, punctuation joined, spaces trimmed', async () => {
    // Row k chose token k and starts at frame 10k: " Hello" (row 1) 0.2–0.4 s, "," joins it, " world" (rows 3–4) 0.6–1.0 s.
    const [words] = await windowWords(window, decode);
    expect(words).toEqual([
      { word: 'Hello,', start: 0.2, end: 0.4 },
      { word: 'world', start: 0.6, end: 1.0 },
    ]);
  });

  it('offsets by the window start and keeps words inside their segment, in order', async () => {
    const [moved] = await windowWords({ ...window, offset: 30, spans: [{ tokens: [0, 1, 2, 3], start: 30, end: 31 }] }, decode);
    expect(moved).toEqual([
      { word: 'Hello,', start: 30.2, end: 30.4 },
      { word: 'world', start: 30.6, end: 31.0 },
    ]);
    const [clamped] = await windowWords({ ...window, spans: [{ tokens: [0, 1, 2, 3], start: 0.5, end: 0.7 }] }, decode);
    expect(clamped).toEqual([
      { word: 'Hello,', start: 0.5, end: 0.5 },
      { word: 'world', start: 0.6, end: 0.7 },
    ]);
    const [after] = await windowWords({ ...window, after: 0.5 }, decode);
    expect(after[0]).toEqual({ word: 'Hello,', start: 0.5, end: 0.5 });
  });

  it('finds each segment’s tokens among the decoded ones, segments without text included', async () => {
    // <|0.00|> " " <|0.20|><|0.20|> " Hello" <|0.60|>: the blank segment has no words but its token keeps its row.
    const blank = [TS, 11, TS + 10, TS + 10, 0, TS + 30];
    const spans = [
      { tokens: [11], start: 0, end: 0.2 },
      { tokens: [0], start: 0.2, end: 1.2 },
    ];
    // " Hello" is decoded token 4: row 4, frames 40–49, ending where row 5 starts.
    const words = await windowWords({ ...window, decoded: blank, attention: blockAttention(blank.length + 1, 80, 10), frames: 80, spans }, decode);
    expect(words).toEqual([[], [{ word: 'Hello', start: 0.8, end: 1.0 }]]);
  });
});

describe('attentionLayers', () => {
  const outputs = whisperDecoderOutputNames(4, true);

  it('groups the alignment heads by cross_attentions output', () => {
    expect(attentionLayers(outputs, [[3, 1], [2, 0], [3, 0]], 4, 6)).toEqual([
      { output: 'cross_attentions.2', heads: [0] },
      { output: 'cross_attentions.3', heads: [0, 1] },
    ]);
  });

  it('falls back to every head of the second half of the layers, and finds none without attention outputs', () => {
    expect(attentionLayers(outputs, undefined, 4, 2)).toEqual([
      { output: 'cross_attentions.2', heads: [0, 1] },
      { output: 'cross_attentions.3', heads: [0, 1] },
    ]);
    expect(attentionLayers(outputs, [[9, 9]], 4, 2)).toHaveLength(2);
    expect(attentionLayers(whisperDecoderOutputNames(4), [[3, 1]], 4, 6)).toEqual([]);
  });
});

describe('timestamped fixture: cross_attentions', () => {
  const { heads, dModel, decoderLayers } = TINY_WHISPER;
  const headDim = dModel / heads;
  const PROMPT = [WHISPER_TOKENS.startOfTranscript, WHISPER_TOKENS.firstLanguage, WHISPER_TOKENS.transcribe];
  let decoder: OnnxSession;
  const states = Float32Array.from({ length: 1500 * dModel }, (_, i) => Math.sin(i * 0.37));
  const f32 = (data: Float32Array, dims: number[]): Tensor => ({ type: 'float32', data, dims });
  const ids = (tokens: number[]): Tensor => ({ type: 'int64', data: BigInt64Array.from(tokens.map(BigInt)), dims: [1, tokens.length] });

  beforeAll(async () => {
    decoder = await OnnxSession.create(path.join(await tinyWhisperTimestampedModel(), WHISPER_FILES.decoder), { threads: 1 });
  });

  afterAll(async () => {
    await decoder?.release();
  });

  function feeds(tokens: number[], cached: boolean): Record<string, Feed> {
    const out: Record<string, Feed> = { input_ids: ids(tokens), encoder_hidden_states: f32(states.slice(), [1, 1500, dModel]), use_cache_branch: { type: 'bool', data: Uint8Array.of(cached ? 1 : 0), dims: [1] } };
    for (let i = 0; i < decoderLayers; i++) {
      for (const part of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) {
        out[`past_key_values.${i}.${part}`] = cached ? { kept: `p.present.${i}.${part}` } : f32(new Float32Array(0), [1, heads, 0, headDim]);
      }
    }
    return out;
  }

  it('outputs each layer’s softmax weights [1, heads, tokens, 1500] after the cache, the same with the KV cache as without', async () => {
    expect(decoder.outputNames).toEqual(whisperDecoderOutputNames(decoderLayers, true));
    const last = `cross_attentions.${decoderLayers - 1}`;
    const whole = await decoder.runWith(feeds(PROMPT, false), { fetch: [last] });
    expect(whole[last]!.dims).toEqual([1, heads, PROMPT.length, 1500]);
    const data = whole[last]!.data as Float32Array;
    for (let row = 0; row < heads * PROMPT.length; row++) {
      const sum = data.subarray(row * 1500, (row + 1) * 1500).reduce((a, b) => a + b, 0);
      expect(sum).toBeCloseTo(1, 4);
    }
    const keep: Record<string, string> = {};
    for (const name of whisperDecoderOutputNames(decoderLayers).slice(1)) keep[name] = `p.${name}`;
    await decoder.runWith(feeds(PROMPT.slice(0, 2), false), { fetch: ['logits'], keep });
    // The cached step returns only the new token's row; picking heads 1 and 3 in the worker sends just those.
    const step = await decoder.runWith(feeds(PROMPT.slice(2), true), { fetch: [last], rows: { [last]: [1, 3] } });
    expect(step[last]!.dims).toEqual([1, 2, 1, 1500]);
    const picked = step[last]!.data as Float32Array;
    for (const [i, head] of [1, 3].entries()) {
      const expected = data.subarray((head * PROMPT.length + 2) * 1500, (head * PROMPT.length + 3) * 1500);
      const got = picked.subarray(i * 1500, (i + 1) * 1500);
      expect(Math.max(...got.map((v, c) => Math.abs(v - expected[c]!)))).toBeLessThan(1e-5);
    }
    await decoder.dropKept();
  });
});
