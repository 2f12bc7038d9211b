import { describe, expect, it } from 'vitest';
import { heardText, type SpokenSentence } from '../../src/realtime/heard-text.js';

/** What a listener heard of a spoken reply, when playback stopped (conversation.item.truncate). */
describe('heardText', () => {
  const spoken: SpokenSentence[] = [
    { text: 'Hello there.', start: 0, end: 1 },
    { text: 'One two three four.', start: 1, end: 3 },
  ];

  it('keeps the sentences played whole, and the words of the one playing in proportion', () => {
    expect(heardText(spoken, 0)).toBe('');
    expect(heardText(spoken, 1)).toBe('Hello there.');
    expect(heardText(spoken, 2)).toBe('Hello there. One two');
    expect(heardText(spoken, 3)).toBe('Hello there. One two three four.');
    expect(heardText(spoken, 10)).toBe('Hello there. One two three four.');
  });

  it('keeps none of a sentence cut short: which of its words its audio holds is unknown', () => {
    const cut = [spoken[0]!, { text: 'One two three four.', start: 1, end: 1.5, cut: true }];
    expect(heardText(cut, 1.5)).toBe('Hello there.');
    expect(heardText(cut, 1.2)).toBe('Hello there.');
  });
});
