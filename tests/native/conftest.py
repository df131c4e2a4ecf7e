"""Fixtures for the native-backend tests: every loop program they compile is verified.

Each kernel these tests build (hand-written, example and random programs alike) goes
through `runtime/native.py`'s `lower_to_loops`; the fixture runs the loop-IR verifier on
the program it returns, so a lowering bug fails here as a `LoopVerifyError` naming the
broken statement rather than as wrong numbers or invalid LLVM IR.
"""

from __future__ import annotations

import pytest

from reverie.compiler.ir.core import Function
from reverie.compiler.loops.ir import Program
from reverie.compiler.loops.verifier import verify_program
from reverie.runtime import native


@pytest.fixture(autouse=True)
def verified_loop_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    lower = native.lower_to_loops

    def lower_and_verify(fn: Function) -> Program:
        program = lower(fn)
        verify_program(program)
        return program

    monkeypatch.setattr(native, "lower_to_loops", lower_and_verify)
