import path from 'node:path';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { cleanPrompt, unescapeHtml } from '../../src/families/stable-diffusion/clip-text.js';
import { CLIP_CONTEXT, ClipTokenizer } from '../../src/families/stable-diffusion/clip-tokenizer.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';

/** The CLIP tokenizer built from the export's vocab.json + merges.txt (the fixture's CLIP-layout vocabulary). */

let tokenizer: ClipTokenizer;
let vocab: Record<string, number>;

beforeAll(async () => {
  const dir = path.join(await tinySdTurboModel(), 'tokenizer');
  tokenizer = await ClipTokenizer.load(path.join(dir, 'vocab.json'), path.join(dir, 'merges.txt'));
  vocab = JSON.parse(await readFile(path.join(dir, 'vocab.json'), 'utf8')) as Record<string, number>;
});

describe('CLIP tokenizer', () => {
  it("has CLIP's vocabulary layout: 49408 symbols, BOS 49406, EOS 49407", () => {
    expect(Object.keys(vocab)).toHaveLength(49408);
    expect([vocab['<|startoftext|>'], vocab['<|endoftext|>'], tokenizer.bos, tokenizer.eos]).toEqual([49406, 49407, 49406, 49407]);
    expect(vocab['a</w>']).toBeDefined();
  });

  it('wraps the text in BOS … EOS and pads to 77 with 0', () => {
    const { ids, truncated } = tokenizer.encode('a photo of a cat');
    expect(ids).toHaveLength(CLIP_CONTEXT);
    expect(truncated).toBe(false);
    const end = ids.indexOf(49407);
    expect(ids[0]).toBe(49406);
    expect(end).toBeGreaterThan(5);
    expect([...ids.slice(end + 1)].every((v) => v === 0)).toBe(true);
    // Whole words end in </w>: "a" is one token, the word-final symbol.
    expect(ids[1]).toBe(vocab['a</w>']);
    expect(tokenizer.decode([...ids.slice(1, end)])).toBe('a photo of a cat');
  });

  it('lower-cases, folds whitespace and splits punctuation and digits as CLIP does', () => {
    const ids = (text: string) => [...tokenizer.encode(text).ids];
    expect(ids('A  Photo\tof a CAT')).toEqual(ids('a photo of a cat'));
    expect(tokenizer.decode([...tokenizer.encode("it's 42!").ids].filter((v) => v !== 0 && v < 49406))).toBe("it 's 4 2 !");
    expect(tokenizer.decode([...tokenizer.encode('Café déjà vu').ids].filter((v) => v !== 0 && v < 49406))).toBe('café déjà vu');
  });

  it('keeps the first 75 tokens of a long prompt and reports the text it kept', () => {
    const long = tokenizer.encode('word '.repeat(100));
    expect(long.truncated).toBe(true);
    expect(long.ids[76]).toBe(49407);
    expect(long.kept!.split(' ').length).toBeLessThan(100);
    expect('word '.repeat(100).startsWith(long.kept!)).toBe(true);
  });
});

/**
 * Prompt cleaning as CLIP's reference tokenizer does it (OpenAI CLIP's
 * simple_tokenizer: ftfy.fix_text, html.unescape twice, whitespace runs to one
 * space, strip, lower case). test/golden/clip-tokens.json was written by
 * scripts/golden/clip_tokens.py with the real ftfy and Python's html module,
 * the BPE over the fixture's vocabulary cross-checked with Hugging Face's
 * CLIPTokenizer.
 */
describe('CLIP prompt cleaning', () => {
  const golden = JSON.parse(readFileSync(fileURLToPath(new URL('../golden/clip-tokens.json', import.meta.url)), 'utf8')) as {
    cases: Array<{ prompt: string; cleaned: string; ids: number[] }>;
  };

  it.each(golden.cases.map((c) => [JSON.stringify(c.prompt), c] as const))('%s: the reference text and token ids', (_, c) => {
    expect(cleanPrompt(c.prompt)).toBe(c.cleaned);
    const { ids } = tokenizer.encode(c.prompt);
    const end = ids.indexOf(tokenizer.eos);
    expect([...ids.slice(1, end)]).toEqual(c.ids);
  });

  it('unescapes entities twice (&amp;amp; → &), collapses and strips whitespace, lower-cases', () => {
    expect(cleanPrompt('  A&amp;amp;B \t\n  C&nbsp;D  ')).toBe('a&b c d');
    expect(cleanPrompt('&amp;amp;amp;')).toBe('&');
    // Inside a line with '<' ftfy leaves entities alone; html.unescape still decodes two levels.
    expect(cleanPrompt('<b> &amp;amp;amp;')).toBe('<b> &amp;');
    expect(tokenizer.encode('fish &amp; chips').ids).toEqual(tokenizer.encode('Fish   & CHIPS').ids);
  });

  it("decodes references with Python's html.unescape rules", () => {
    expect(unescapeHtml('&#65;&#x42;&#x80;&#0;&#xD800;&#1;&#x110000;')).toBe('AB€\ufffd\ufffd\ufffd');
    expect(unescapeHtml('&ampfoo &notit; &unknown; &lt')).toBe('&foo ¬it; &unknown; <');
  });

  // test/golden/html-unescape.json: Python's own output, by scripts/golden/html_unescape.py.
  const unescaped = JSON.parse(readFileSync(fileURLToPath(new URL('../golden/html-unescape.json', import.meta.url)), 'utf8')) as { cases: Array<[string, string]> };

  it.each(unescaped.cases.map(([input, output]) => [JSON.stringify(input), input, output] as const))("%s as Python's html.unescape reads it", (_, input, output) => {
    expect(unescapeHtml(input)).toBe(output);
  });
});
