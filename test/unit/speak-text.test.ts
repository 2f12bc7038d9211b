import { describe, expect, it } from 'vitest';
import { packSentences, SentenceStream, splitSentences } from '../../src/core/tasks/speak/sentences.js';
import { canonicalLanguage, canonicalSpeaker } from '../../src/core/tasks/speak/voices.js';
import type { SpeechModelInfo } from '../../src/core/tasks/speak/synthesizer.js';

describe('splitSentences', () => {
  it('cuts at sentence ends and keeps every character of the text', () => {
    const text = 'The first sentence is here. The second one asks a question? And the third exclaims!';
    const pieces = splitSentences(text, { minChars: 10 });
    expect(pieces).toEqual(['The first sentence is here.', 'The second one asks a question?', 'And the third exclaims!']);
  });

  it('joins short sentences with the next, and a short tail with the last piece', () => {
    expect(splitSentences('Hi. How are you doing today, my friend? Fine.', { minChars: 20 })).toEqual(['Hi. How are you doing today, my friend? Fine.']);
  });

  it('does not cut inside numbers or abbreviations without a following space', () => {
    expect(splitSentences('Version 3.14 is out now for everyone.', { minChars: 5 })).toEqual(['Version 3.14 is out now for everyone.']);
  });

  it('cuts Chinese and Japanese at their full-width punctuation', () => {
    const pieces = splitSentences('今天天气很好。我们去公园散步吧！你觉得怎么样？', { minChars: 3 });
    expect(pieces).toEqual(['今天天气很好。', '我们去公园散步吧！', '你觉得怎么样？']);
  });

  it('cuts an over-long sentence at a clause boundary, else at a space, never above the limit', () => {
    const clause = 'a'.repeat(30) + ', ' + 'b'.repeat(30) + ' ' + 'c'.repeat(10);
    const pieces = splitSentences(clause, { minChars: 1, maxChars: 40 });
    expect(pieces[0]).toBe('a'.repeat(30) + ',');
    for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(40);
    expect(pieces.join(' ').replace(/\s+/g, '')).toBe(clause.replace(/\s+/g, ''));
    const unbroken = 'x'.repeat(95);
    expect(splitSentences(unbroken, { maxChars: 40 })).toEqual(['x'.repeat(40), 'x'.repeat(40), 'x'.repeat(15)]);
  });

  it('treats line breaks as boundaries and drops blank pieces', () => {
    expect(splitSentences('First line without a stop\n\nSecond line without one either\n', { minChars: 5 })).toEqual([
      'First line without a stop',
      'Second line without one either',
    ]);
  });
});

describe('packSentences (models that speak a whole text in one pass)', () => {
  it('keeps a text within the limit whole, however many sentences, line breaks included', () => {
    const text = 'Hi. How are you?\nFine, thanks!  See you.';
    expect(packSentences(`  ${text} `, text.length)).toEqual([text]);
    expect(packSentences('   ', 10)).toEqual([]);
  });

  it('beyond the limit, packs as many whole sentences into each piece as fit', () => {
    const text = 'One two three. Four five six. Seven eight. Nine ten eleven twelve.';
    expect(packSentences(text, 30)).toEqual(['One two three. Four five six.', 'Seven eight.', 'Nine ten eleven twelve.']);
    expect(packSentences(text, 45)).toEqual(['One two three. Four five six. Seven eight.', 'Nine ten eleven twelve.']);
    const cjk = '今天天气很好。我们去公园散步吧！你觉得怎么样？';
    expect(packSentences(cjk, 16)).toEqual(['今天天气很好。我们去公园散步吧！', '你觉得怎么样？']);
  });

  it('cuts only a sentence longer than the limit, at a clause boundary, and packs on after it', () => {
    const long = `${'a'.repeat(30)}, ${'b'.repeat(30)}.`;
    const pieces = packSentences(`Short one. ${long} Tail.`, 40);
    expect(pieces).toEqual(['Short one.', `${'a'.repeat(30)},`, `${'b'.repeat(30)}. Tail.`]);
    for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(40);
  });
});

describe('voices', () => {
  const info: SpeechModelInfo = { sampleRate: 24000, mode: 'preset', languages: ['English', 'Chinese', 'Beijing_Dialect'], speakers: ['Vivian', 'Uncle_Fu'], defaultSpeaker: 'Vivian', rateControl: false };

  it('maps languages by name in any case, by ISO code, and auto to undefined', () => {
    expect(canonicalLanguage('english', info.languages, 'm')).toBe('English');
    expect(canonicalLanguage('zh-CN', info.languages, 'm')).toBe('Chinese');
    expect(canonicalLanguage('beijing dialect', info.languages, 'm')).toBe('Beijing_Dialect');
    expect(canonicalLanguage('auto', info.languages, 'm')).toBeUndefined();
    expect(canonicalLanguage(undefined, info.languages, 'm')).toBeUndefined();
    expect(() => canonicalLanguage('klingon', info.languages, 'm')).toThrow(/does not speak 'klingon'. Languages: auto, English, Chinese, Beijing_Dialect/);
  });

  it('maps speakers in any case, defaults to the model default, and lists the valid ones otherwise', () => {
    expect(canonicalSpeaker('uncle_fu', info, 'm', 'voice')).toBe('Uncle_Fu');
    expect(canonicalSpeaker(undefined, info, 'm', 'voice')).toBe('Vivian');
    // OpenAI's voice names (its SDKs require one) fall back to the default voice; as an explicit speaker they do not.
    expect(canonicalSpeaker('alloy', info, 'm', 'voice')).toBe('Vivian');
    expect(() => canonicalSpeaker('alloy', info, 'm', 'speaker')).toThrow(/no speaker 'alloy'/);
    try {
      canonicalSpeaker('bob', info, 'm', 'voice');
      expect.unreachable();
    } catch (error) {
      expect((error as { status: number }).status).toBe(400);
      expect((error as { param: string }).param).toBe('voice');
      expect((error as Error).message).toBe("Model 'm' has no speaker 'bob'. Speakers: Vivian, Uncle_Fu.");
    }
  });
});

describe('SentenceStream (text arriving in pieces)', () => {
  /** Feeds `text` in pieces of `size` characters; returns what each push gave and the end's rest. */
  const feed = (stream: SentenceStream, text: string, size: number) => {
    const pieces: string[][] = [];
    for (let at = 0; at < text.length; at += size) pieces.push(stream.push(text.slice(at, at + size)));
    return { pieces, rest: stream.end() };
  };

  it('gives a sentence once text follows its end, never the sentence still being written', () => {
    const stream = new SentenceStream({ minChars: 1 });
    expect(stream.push('It costs 3.')).toEqual([]);
    expect(stream.push('14 euros. And')).toEqual(['It costs 3.14 euros.']);
    expect(stream.push(' more')).toEqual([]);
    expect(stream.end()).toEqual(['And more']);
  });

  it('loses and adds nothing, however the text is cut into pieces', () => {
    const text = 'First, a clause. Then a sentence that runs on for a while! And a question? Yes.';
    for (const size of [1, 3, 7, 100]) {
      const { pieces, rest } = feed(new SentenceStream({ firstMinChars: 10, firstWordsChars: 20 }), text, size);
      expect([...pieces.flat(), ...rest].join(' ').replace(/\s+/g, ' ')).toBe(text);
    }
  });

  it('lets the first piece end at a clause, and later ones only at sentences joined to minChars', () => {
    const { pieces, rest } = feed(new SentenceStream({ firstMinChars: 10 }), 'Well, let me think, about it. Ok. Fine, then. Bye.', 1);
    expect(pieces.flat()).toEqual(['Well, let me think,', 'about it. Ok. Fine, then.']);
    expect(rest).toEqual(['Bye.']);
  });

  it('ends a first piece with no boundary at the first space from firstWordsChars on, as soon as that word is complete', () => {
    const words = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
    const stream = new SentenceStream({ firstMinChars: 10, firstWordsChars: 20 });
    // "word0 word1 word2 wo": 20 characters, the word not yet complete.
    expect(stream.push(words.slice(0, 20))).toEqual([]);
    expect(stream.push(words.slice(20, 24))).toEqual(['word0 word1 word2 word3']);
    // A run with no space is cut once it is as long again.
    const run = new SentenceStream({ firstMinChars: 10, firstWordsChars: 20 });
    expect(run.push('x'.repeat(39))).toEqual([]);
    expect(run.push('x')).toEqual(['x'.repeat(40)]);
  });

  it('keeps the first piece short when the text opens with nothing to say (a run of spaces)', () => {
    const stream = new SentenceStream({ firstMinChars: 10, firstWordsChars: 20 });
    expect(stream.push(' '.repeat(40))).toEqual([]);
    const words = Array.from({ length: 20 }, (_, i) => `word${i}`).join(' ');
    const first = stream.push(words)[0]!;
    expect(first.length).toBeLessThanOrEqual(30);
    expect(words.startsWith(first)).toBe(true);
  });
});
