"""What benchmark times depend on: the host's CPU, its vector features, the CPUs this
process may use, the libraries' versions and the load average.

`host_info()` gathers them into a dict (kept in `run.py --json`); `host_line()` writes them
on one line for the head of a report. Reading /proc/cpuinfo is all it needs; LLVM's name for
the microarchitecture ("znver4") comes from Reverie's own host description when Reverie can
give it.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

VECTOR_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw",
                   "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                   "amx_bf16", "amx_int8", "asimd", "sve", "sve2")
LIBRARIES = ("numpy", "torch", "jax", "jaxlib", "llvmlite")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's "key: value" lines of /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_description(text: str) -> dict[str, object]:
    """The CPU's model name, family / model / stepping, and which of `VECTOR_FEATURES` its
    flags (x86 "flags", Arm "Features") list, from /proc/cpuinfo text."""
    fields = cpuinfo_fields(text)
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    identity = " ".join(f"{name} {fields[key]}" for name, key in
                        (("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))
                        if key in fields)
    return {"model": fields.get("model name") or platform.processor() or "unknown CPU",
            "identity": identity,
            "vector_features": [flag for flag in VECTOR_FEATURES if flag in flags]}


def cpu_quota() -> float | None:
    """The cgroup v2 CPU quota in CPUs (`cpu.max`), or None where there is none."""
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        return int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def llvm_cpu_name() -> str | None:
    """LLVM's name for the host CPU (e.g. "znver4"), from Reverie's host description."""
    try:
        from reverie.runtime.native.remembered import host_description

        return host_description().split()[1]
    except Exception:  # (Reverie or LLVM unavailable: the name is only a courtesy)
        return None


def library_versions() -> dict[str, str]:
    """Python's and each of `LIBRARIES`' version ("missing" where not installed)."""
    versions = {"python": platform.python_version()}
    for package in LIBRARIES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "missing"
    versions["numpy's BLAS"] = numpy_blas()
    return versions


def numpy_blas() -> str:
    """The BLAS NumPy was built with, and its version (as NumPy's build records them)."""
    try:
        import numpy

        blas = numpy.__config__.CONFIG["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']}"
    except (ImportError, AttributeError, KeyError, TypeError):
        return "unknown"


def git_commit() -> str | None:
    """The checkout's short commit, with "+changes" when its tracked files differ."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                                capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+changes" if dirty else "")


def host_info() -> dict[str, object]:
    """Everything `host_line` reports, as a dict."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return {**cpu_description(cpuinfo), "llvm_cpu": llvm_cpu_name(),
            "cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
            "cpu_quota": cpu_quota(), "libraries": library_versions(),
            "commit": git_commit(), "load_average": list(os.getloadavg())}


def host_line(info: dict[str, object]) -> str:
    """`host_info()` on one line."""
    cpu = info["model"] + "".join(f" ({part})" for part in (info["identity"], info["llvm_cpu"])
                                  if part)
    cpus = f"{info['cpus']} CPUs, {info['usable_cpus']} usable"
    if info["cpu_quota"] is not None:
        cpus += f", cgroup quota {info['cpu_quota']:g}"
    versions = ", ".join(f"{name} {version}" for name, version in info["libraries"].items())
    load = ", ".join(f"{value:.1f}" for value in info["load_average"])
    features = " ".join(info["vector_features"]) or "none of " + " ".join(VECTOR_FEATURES)
    return (f"Host: {cpu}; vector: {features}; {cpus}; {versions}; "
            f"commit {info['commit'] or 'unknown'}; load average {load}")
