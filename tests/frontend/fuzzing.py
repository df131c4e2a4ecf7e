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


def blow_up(rng: random.Random) -> str:
    """A program of one of the shapes that once made compile time blow up or broke a later
    stage: call fan-out, wide tuples, flat chains, long names, empty ranges, big literals."""
    shape = rng.randrange(6)
    if shape == 0:
        return fan_out(rng.randint(20, 40), rng.choice(["+", "*", "-"]))
    if shape == 1:
        return wide_tuple(rng.randint(200, 600))
    if shape == 2:
        op = rng.choice(["+", "-", "*"])
        return "fn f(x: f32[N]) -> f32[N] { return " + f" {op} ".join(
            rng.choice(["x", "1.5", "exp(x)", "(x * 2.0)"]) for _ in range(rng.randint(200, 1200))
        ) + "; }"
    if shape == 3:
        name = rng.choice("abxN") * rng.randint(1000, 1100)
        return (f"fn f({name}: f32[N], {name}_: f32[N]) -> f32 "
                f"{{ let {name}{name} = {name} * {name}_; return sum({name}{name}); }}")
    if shape == 4:
        lo, hi = rng.randint(-5, 5), rng.randint(-5, 5)
        return (f"fn f(x: f32[N]) -> f32 {{ var s = sum(x); for t in {lo}..{hi} "
                "{ s = s * 0.5 + sum(x * x); } return s; }")
    literal = rng.choice([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 3_000_000_000])
    return f"fn f(x: i32[N]) -> i32[N] {{ return x + {literal}; }}"


def fan_out(depth: int, op: str = "+") -> str:
    """`g_k(x) = g_{k-1}(x) op g_{k-1}(x)`: 2**depth calls when inlined naively."""
    lines = ["fn g0(x: f64[N]) -> f64[N] { return sin(x); }"]
    lines += [f"fn g{k}(x: f64[N]) -> f64[N] {{ return g{k - 1}(x) {op} g{k - 1}(x); }}"
              for k in range(1, depth + 1)]
    return "\n".join(lines)


def wide_tuple(width: int) -> str:
    """A function returning a tuple of `width` scalars."""
    types = ", ".join(["f64"] * width)
    elements = ", ".join(f"x[{i % 4}] * {i}.0" for i in range(width))
    return f"fn f(x: f64[4]) -> ({types}) {{ return ({elements}); }}"
