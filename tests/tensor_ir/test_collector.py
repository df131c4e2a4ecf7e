"""`collector_paused` (compiler/collector.py): the garbage collector is off inside it, back
on after it (also when the body raises), and a collector the program turned off stays off;
compiling pauses it and leaves it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import reverie as rv
from reverie.compiler import pipeline
from reverie.compiler.collector import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_restored_after(collector_on: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the inner pause does not turn it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_when_the_body_raises(collector_on: None) -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("x")
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off(collector_on: None) -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_compiling_pauses_the_collector_and_leaves_it_on(
        collector_on: None, uncached: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # (uncached: a disk cache holding this source's function table would skip the parse)
    seen = []
    parse = pipeline.parse
    monkeypatch.setattr(pipeline, "parse",
                        lambda *args: (seen.append(gc.isenabled()), parse(*args))[1])
    kernel = rv.compile("fn f(x: f64[N]) -> f64 { return sum(x * x); }").f
    assert kernel.grad()([1.0, 2.0])[0].tolist() == [2.0, 4.0]
    assert seen == [False] and gc.isenabled()
