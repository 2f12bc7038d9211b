#!/usr/bin/env python3
"""
Golden G.711 tables from Python's audioop (CPython's C port of Sun's
reference coder; the module left the standard library in Python 3.13, so
this needs 3.12 or older): the 16-bit value of every μ-law and A-law code,
and the code audioop gives every 16-bit sample, written as runs (the input
where the code changes, and the new code) to keep the file small. Compared
by test/unit/audio-g711.test.ts against src/audio/g711.ts.

Usage: python3 scripts/golden/g711_audioop.py [OUT.json]
"""

import json
import struct
import sys
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

OUT = sys.argv[1] if len(sys.argv) > 1 else "test/golden/g711-audioop.json"


def runs(encode):
    """[[first sample, code], …] over every sample from -32768 to 32767."""
    codes = encode(struct.pack("<65536h", *range(-32768, 32768)), 2)
    out = []
    for i, code in enumerate(codes):
        if not out or out[-1][1] != code:
            out.append([i - 32768, code])
    return out


def decoded(decode):
    return list(struct.unpack("<256h", decode(bytes(range(256)), 2)))


data = {
    "about": "audioop (Python %s): ulaw2lin/alaw2lin of codes 0-255; lin2ulaw/lin2alaw of every 16-bit sample as runs" % sys.version.split()[0],
    "ulaw": {"decode": decoded(audioop.ulaw2lin), "encodeRuns": runs(audioop.lin2ulaw)},
    "alaw": {"decode": decoded(audioop.alaw2lin), "encodeRuns": runs(audioop.lin2alaw)},
}
with open(OUT, "w") as f:
    json.dump(data, f, separators=(",", ":"))
    f.write("\n")
print(f"wrote {OUT}: {len(data['ulaw']['encodeRuns'])} μ-law runs, {len(data['alaw']['encodeRuns'])} A-law runs")
