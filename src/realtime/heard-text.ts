/**
 * What the listener of a spoken reply heard: each sentence's place in the
 * reply's audio, and from it the text up to where playback stopped (a
 * client's conversation.item.truncate), which becomes the model's memory of
 * its answer.
 */

/** Where a sentence's audio starts in the reply's audio, for cutting the transcript at what was heard. */
export interface SpokenSentence {
  text: string;
  /** Seconds into the reply's audio. */
  start: number;
  end: number;
  /** The reply was stopped while this sentence was being spoken: its audio ends early, and which of its words it holds is unknown. */
  cut?: boolean;
}

/**
 * The part of a reply's text the listener heard, when playback stopped
 * `heardSeconds` into its audio: every sentence whose audio ended before,
 * and of the one playing then the words in proportion to its audio played,
 * to the last whole word. Of a sentence cut short, none: how many of its
 * words its audio holds is unknown, and the model had better forget words
 * than remember unheard ones.
 */
export function heardText(spoken: readonly SpokenSentence[], heardSeconds: number): string {
  const parts: string[] = [];
  for (const sentence of spoken) {
    if (sentence.cut) break;
    if (sentence.end <= heardSeconds) {
      parts.push(sentence.text);
      continue;
    }
    if (sentence.start < heardSeconds) {
      const words = sentence.text.split(/\s+/);
      const fraction = (heardSeconds - sentence.start) / Math.max(sentence.end - sentence.start, 1e-6);
      const kept = words.slice(0, Math.floor(words.length * fraction)).join(' ');
      if (kept) parts.push(kept);
    }
    break;
  }
  return parts.join(' ');
}
