#!/usr/bin/env python3
"""
Golden outputs of Python's html.unescape (the function CLIP's basic_clean
calls twice) for references that its rules and the HTML standard's, as the
`entities` package implements them, could read differently: numeric
references to control characters, non-characters, surrogates, C1 bytes and
numbers past U+10FFFF; legacy names without ';' and the longest known prefix;
names that only exist with ';'; upper-case spellings; the 32-character name
limit. Written to test/golden/html-unescape.json and compared by
test/unit/image-tokenizer.test.ts against clip-text.ts's unescapeHtml.

Usage: python3 scripts/golden/html_unescape.py [OUT.json]
"""

import html
import json
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "test/golden/html-unescape.json"


def numeric():
    """Every code point class html.unescape treats on its own, in decimal and hex, with and without ';'."""
    points = [0x0, 0x1, 0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE, 0x1F, 0x20, 0x41, 0x7E, 0x7F]
    points += list(range(0x80, 0xA0))  # C1: Windows-1252, where it defines the byte
    points += [0xA0, 0xFF, 0xD7FF, 0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xE000, 0xFDCF, 0xFDD0, 0xFDEF, 0xFDF0]
    points += [0xFFFD, 0xFFFE, 0xFFFF, 0x10000, 0x1D504, 0x1FFFE, 0x1FFFF, 0x10FFFD, 0x10FFFE, 0x10FFFF, 0x110000]
    points += [0x10000FFFE, 2**64 + 0x41]  # past U+10FFFF even where the low bits name a non-character or a letter
    cases = []
    for cp in points:
        cases += [f"&#{cp};", f"&#x{cp:x}", f"&#X{cp:X};z"]
    return cases + ["&#0000065;", "&#x;", "&#;", "&#xg;", "&#65a", "&#9999999999999999999999999;"]


NAMED = [
    "&amp; &AMP; &amp &Amp;",
    "&ampfoo &amp;foo &ampx; &amp-x &amp;amp;",
    "&notit; &notin; &notin &not; &noti &NOT;",
    "&lt&gt; &LT &GT; &lt5 &ltx",
    "&copy2024 &COPY &Copy; &copy;right",
    "&sup2 &sup2; &sup &sup; &supe; &sup1x",
    "&frac12 &frac12; &frac1 &frac34x",
    "&eacute &Eacute; &EACUTE; &eacute- &Eacutex",
    "&NTILDE; &ntilde &Ntilde; &nTilde;",
    "&Afr; &Afr &fjlig; &NotEqualTilde; &nvlt;",
    "&Xi$ &Chi) &eta8 &Psi- &BreveX &Omega-; &PlusMinus1;",
    "&CounterClockwiseContourIntegral; &CounterClockwiseContourIntegralx;",
    "&" + "a" * 40 + ";",
    "&amp" + "x" * 40 + ";",
    "&unknown; &; & ; &&amp; &#&amp; a&b",
    "&nbsp&nbsp;\u00a0&NBSP; &shy; &zwj; &zwnj;",
    "&lt\t&gt\n&amp\f&quot &apos &apos;",
    "caf&eacute; cr&egrave;me br&ucirc;l&eacute;e",
    "&é &amp;é &ampé &notinvé",
    "&𝔄fr; &amp𝔄",
]


def main():
    inputs = numeric() + NAMED
    about = "Python's html.unescape (" + ".".join(map(str, sys.version_info[:3])) + ") on tricky references: [input, output] pairs, by scripts/golden/html_unescape.py"
    pairs = ",\n".join("  " + json.dumps([s, html.unescape(s)]) for s in inputs)
    with open(OUT, "w") as f:
        f.write('{\n "about": ' + json.dumps(about) + ',\n "cases": [\n' + pairs + "\n ]\n}\n")
    print(f"{len(inputs)} cases → {OUT}")


if __name__ == "__main__":
    main()
