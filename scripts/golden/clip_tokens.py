#!/usr/bin/env python3
"""
Golden CLIP token ids for prompts with HTML entities, odd quotes, wide
characters and whitespace runs, written to test/golden/clip-tokens.json and
compared by test/unit/image-tokenizer.test.ts.

The reference is OpenAI CLIP's simple_tokenizer (as open_clip keeps it):

    basic_clean(text)      = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    whitespace_clean(text) = regex.sub(r"\\s+", " ", text).strip()
    tokens                 = bpe over regex.findall(pattern, whitespace_clean(basic_clean(text)).lower())

run here with the real ftfy (6.x) and Python's html module, over the
vocabulary and merges of the synthetic SD-Turbo fixture (its CLIP-layout
vocabulary is derived from GPT-2's merges, so ids differ from the real
CLIP's: the cleaning, not the vocabulary, is what these tables pin). The BPE
is simple_tokenizer's, and the script checks that the Hugging Face
tokenizers CLIP model (transformers' CLIPTokenizer) gives the same ids for
the cleaned text.

Usage: python scripts/golden/clip_tokens.py TOKENIZER_DIR [OUT.json]
(TOKENIZER_DIR: test/.cache/sd-turbo-tiny/tokenizer, written by the unit
tests' fixture; needs ftfy, regex and transformers.)
"""

import html
import json
import os
import sys

import ftfy
import regex as re

PROMPTS = [
    "A  photo\tof a CAT",
    "fish &amp; chips &amp;amp; a pint",
    "&lt;b&gt;Bold&lt;/b&gt; &quot;quoted&quot; text",
    "caf&eacute; cr&egrave;me br&ucirc;l&eacute;e, &#x2764; &#9733;",
    "   leading and trailing   \n\n  whitespace\r\n runs\u3000here  ",
    "\u201cCurly\u201d \u2018quotes\u2019 and the \ufb01nest \ufb02owers, \uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28",
    "a <tag> keeps ftfy from unescaping &amp;lt; but html.unescape still runs twice",
    "P&EACUTE;REZ &NTILDE; &copy 2024 &notit; x&amp",
    "\x1b[31mred alert\x1b[0m\x00 \ufeffbom",
    "it's 42\u00b0C &mdash; isn't it?",
]

PATTERN = re.compile(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""", re.IGNORECASE)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def get_pairs(word):
    return {(a, b) for a, b in zip(word, word[1:])}


def basic_clean(text):
    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text))
    return text.strip()


def whitespace_clean(text):
    text = re.sub(r"\s+", " ", text)
    return text.strip()


class SimpleTokenizer:
    """OpenAI CLIP's simple_tokenizer over a vocab.json + merges.txt pair."""

    def __init__(self, vocab_path, merges_path):
        self.byte_encoder = bytes_to_unicode()
        with open(vocab_path, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            merges = f.read().strip().split("\n")[1 : 49152 - 256 - 2 + 1]
        self.bpe_ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
        self.cache = {"<|startoftext|>": "<|startoftext|>", "<|endoftext|>": "<|endoftext|>"}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token[:-1]) + (token[-1] + "</w>",)
        pairs = get_pairs(word)
        if not pairs:
            return token + "</w>"
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, cleaned):
        ids = []
        for token in re.findall(PATTERN, cleaned):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return ids


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tokenizer_dir = sys.argv[1]
    out_path = sys.argv[2] if len(sys.argv) > 2 else "test/golden/clip-tokens.json"
    vocab = os.path.join(tokenizer_dir, "vocab.json")
    merges = os.path.join(tokenizer_dir, "merges.txt")
    simple = SimpleTokenizer(vocab, merges)
    from transformers import CLIPTokenizer

    fast = CLIPTokenizer(vocab=json.load(open(vocab, encoding="utf-8")), merges=[tuple(m.split()) for m in open(merges, encoding="utf-8").read().strip().split("\n")[1 : 49152 - 256 - 2 + 1]])
    cases = []
    for prompt in PROMPTS:
        cleaned = whitespace_clean(basic_clean(prompt)).lower()
        ids = simple.encode(cleaned)
        check = fast(cleaned, add_special_tokens=False)["input_ids"]
        assert ids == check, (prompt, ids, check)
        cases.append({"prompt": prompt, "cleaned": cleaned, "ids": ids})
    doc = {
        "about": "OpenAI CLIP simple_tokenizer cleaning (ftfy.fix_text, html.unescape twice, whitespace, lower) and BPE over the synthetic SD-Turbo fixture's CLIP-layout vocabulary, by scripts/golden/clip_tokens.py",
        "ftfy": ftfy.__version__,
        "cases": cases,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} prompts → {out_path}")


if __name__ == "__main__":
    main()
