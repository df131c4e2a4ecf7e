"""`reverie demo` (the README's main job) off a terminal: it fits, checks and times, and its
progress comes as plain lines, never as a redrawn bar (README.md)."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_and_prints_plain_progress_lines_off_a_terminal() -> None:
    result = subprocess.run([sys.executable, "-m", "reverie", "demo"], capture_output=True,
                            text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-2000:]
    assert "\r" not in output
    progress = [line for line in output.splitlines() if line.startswith("fitting: step")]
    assert 1 <= len(progress) <= 10, output
    assert "demo finished: ok" in output
