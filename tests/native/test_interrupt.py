"""Kernels that stop: a signal delivered while a native kernel runs (SIGINT, or one whose
Python handler raises) stops it at its next poll (`backend/llvm.py`: outer back-edges,
`for`/`while` iterations, chunk boundaries) and the call raises the handler's exception,
no output handed back; the process then calls kernels as before (the interpreter backend
stops too, between its NumPy operations). Each case runs in a child process, which another
process signals while a kernel of several seconds runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIGNAL_AFTER = 0.4  # seconds into the long call
LATE = 1.0  # seconds after the signal by which the call must have stopped (generous for CI)

HEAT_KERNEL = """fn heat(u0: f64[N], steps: i64) -> f64 {
    var u = u0;
    for t in 0..steps { u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1)); }
    return sum(u * u);
}"""  # a long loop of time steps, written into both child scripts

SCRIPT = r'''
import os, signal, subprocess, sys, time
import numpy as np
import reverie as rv

m = rv.compile("""
HEAT_KERNEL
fn halve(x: f64[N], limit: i64) -> f64[N] {
    var y = x;
    var steps = 0;
    while steps < limit and max(abs(y)) > 0.0 { y = y * 0.999999 + 1e-300; steps = steps + 1; }
    return y;
}
fn rows(x: f64[M], w: f64[K]) -> f64[M] {
    let y[m] = sum[k](tanh(x[m] * w[k]) * sin(w[k]));
    return y;
}
""")
interp = rv.compile(m.source, backend="interp")
rng = np.random.default_rng(0)
u, x, w = rng.standard_normal(4096), rng.standard_normal(256), rng.standard_normal(16)
calls = {
    "forward": lambda: m.heat(u, 10**9),
    "grad": lambda: m.heat.grad("u0")(u, 10**8),
    "while": lambda: m.halve(u, 10**9),
    "nest": lambda: m.rows(rng.standard_normal(1 << 16), rng.standard_normal(1 << 16)),
    "python path": lambda: m.heat(list(u), 10**9),
    "interp": lambda: interp.heat(u, 10**9),
}
small = {"forward": lambda: m.heat(u, 3), "grad": lambda: m.heat.grad("u0")(u, 3),
         "while": lambda: m.halve(u, 3), "nest": lambda: m.rows(x, w),
         "python path": lambda: m.heat(list(u), 3), "interp": lambda: interp.heat(u, 3)}
case, handler = sys.argv[1], sys.argv[2]
expected = small[case]()  # compiles (and warms) the kernel
if handler == "custom":
    class Stop(Exception):
        pass
    def raise_stop(number, frame):
        raise Stop(number)
    signal.signal(signal.SIGINT, raise_stop)
    caught = Stop
else:
    caught = KeyboardInterrupt
# another process sends the signal (a thread of this one might wait for the GIL)
killer = ("import os, signal, sys, time; time.sleep(%s); t = time.time(); "
          "os.kill(%d, signal.SIGINT); print(t)") % (SIGNAL_AFTER, os.getpid())
sender = subprocess.Popen([sys.executable, "-c", killer], stdout=subprocess.PIPE, text=True)
start = time.time()
try:
    calls[case]()
    print("finished", time.time() - start)
except caught:
    stopped = time.time()
    print("stopped", stopped - float(sender.communicate()[0]))
again = small[case]()
print("same" if np.array_equal(np.asarray(again), np.asarray(expected)) else "different")
'''.replace("SIGNAL_AFTER", str(SIGNAL_AFTER)).replace("HEAT_KERNEL", HEAT_KERNEL)


def run_case(case: str, handler: str) -> list[str]:
    env = {**os.environ, "REVERIE_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, case, handler], env=env,
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


@pytest.mark.parametrize("case", ["forward", "grad", "while", "nest", "python path", "interp"])
def test_sigint_stops_a_running_kernel(case: str) -> None:
    status, seconds, again = run_case(case, "default")
    assert status == "stopped", f"the {case} kernel ran to its end ({seconds} s)"
    assert float(seconds) < LATE
    assert again == "same"


def test_a_python_handlers_exception_propagates() -> None:
    status, seconds, again = run_case("nest", "custom")
    assert status == "stopped" and float(seconds) < LATE
    assert again == "same"


REARM_SCRIPT = r'''
import os, signal, subprocess, sys, time
import numpy as np
import reverie as rv
m = rv.compile("""
HEAT_KERNEL
""")
u = np.ones(4096)
m.heat(u, 3)
signal.signal(signal.SIGINT, signal.default_int_handler)  # CPython's C handler again
killer = "import os, signal, time; time.sleep(0.5); os.kill(%d, signal.SIGINT)" % os.getpid()
subprocess.Popen([sys.executable, "-c", killer])
start = time.time()
try:
    m.heat(u, 10**9)
    print("finished")
except KeyboardInterrupt:
    print("stopped", time.time() - start)
'''.replace("HEAT_KERNEL", HEAT_KERNEL)


def test_the_handler_is_armed_again_after_signal_signal() -> None:
    """`signal.signal` puts CPython's C handler back; the running kernel re-arms ours."""
    out = subprocess.run([sys.executable, "-c", REARM_SCRIPT], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    status, seconds = out.stdout.split()
    assert status == "stopped" and float(seconds) < 0.5 + LATE
