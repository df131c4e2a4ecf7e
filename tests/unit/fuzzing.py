"""Seeded source mutation shared by the parser and compiler fuzz tests."""

from __future__ import annotations

import random

TOKENS = (
    "fn let var for in return true false and or not ( ) [ ] { } , ; : .. . -> = == != < <= "
    "** * / // % @ - + x N T 0 7 1.5 1e-3 .5 sum[k] max[j in 0..N] f32 f32[N] i64[N] "
    "exp(x) x[:, 0] (a,) () # :: ... ===".split()
) + ["\n", " "]
ODD_CHARACTERS = list("$\x00\x07\t\r\x0bé\u2028\ufeff'\"\\!")


def mutate(source: str, rng: random.Random) -> str:
    """Apply one to three random edits to `source`."""
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(source) + 1)
        j = min(len(source), i + rng.randint(1, 12))
        edit = rng.randrange(6)
        if edit == 0:
            source = source[:i] + source[j:]
        elif edit == 1:
            source = source[:i] + rng.choice(TOKENS) + source[i:]
        elif edit == 2:
            source = source[:i] + rng.choice(ODD_CHARACTERS) + source[i:]
        elif edit == 3 and source:
            k = rng.randrange(len(source))
            low, high = sorted((min(i, len(source) - 1), k))
            chars = list(source)
            chars[low], chars[high] = chars[high], chars[low]
            source = "".join(chars)
        elif edit == 4:
            source = source[:j] + source[i:j] * rng.randint(1, 3) + source[j:]
        else:
            source = source[:i]
    return source
