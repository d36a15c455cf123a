"""Regenerate es6-numbers.txt.gz: doubles and their ECMAScript Number::toString text.

The doubles are the static edge-case table of the es6testfile100m corpus
(cyberphone/json-canonicalization, testdata numgen.js: RFC 8785's own samples and
powers of ten near every rounding step), the first 200 smallest normals, the two
neighbours of every power of ten from 1e-324 to 1e308 (both signs), values a price
or an amount takes, and 4,000 random finite bit patterns (seed 8785). The expected text
is written by Node.js (V8's Number.prototype.toString), not by Python:

    python tests/assets/jcs/make_es6_numbers.py | node tests/assets/jcs/es6_to_string.js \
        | gzip -9n > tests/assets/jcs/es6-numbers.txt.gz
"""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path

STATIC = [
    line
    for line in (Path(__file__).parent / "es6-static-doubles.txt").read_text().split("\n")
    if line and not line.startswith("#")
]


def _hex(x: float) -> str:
    return struct.pack(">d", x).hex()


def doubles() -> list[str]:
    out = list(STATIC)
    out += [f"{0x0010000000000000 + i:016x}" for i in range(200)]
    for e in range(-324, 309):
        x = float(f"1e{e}")
        for y in (math.nextafter(x, 0.0), x, math.nextafter(x, math.inf)):
            if y != 0.0 and math.isfinite(y):
                out += [_hex(y), _hex(-y)]
    rng = random.Random(8785)
    out += [_hex(rng.randrange(0, 10**9) / 100) for _ in range(500)]  # cents
    out += [_hex(rng.randrange(0, 10**6) / 10 ** rng.randrange(0, 9)) for _ in range(500)]
    target = len(out) + 4000
    while len(out) < target:
        bits = rng.getrandbits(64)
        if (bits >> 52) & 0x7FF != 0x7FF:  # finite
            out.append(f"{bits:016x}")
    return out


if __name__ == "__main__":
    print("\n".join(doubles()))
