"""lagd's CPU by Python function, from the kernel's own samples (``perf``), not wall time.

A sampling profiler that reads the interpreter's stacks (py-spy) charges a function with
the time lagd waits for a core inside it: at nice 10 beside a busy replica that is most
of the time a probe's ``write()`` takes, since the server thread it wakes takes lagd's
core. ``perf record -e cpu-clock`` samples only on-CPU time. With Python 3.12 or newer
run with ``PYTHONPERFSUPPORT=1`` every Python function gets a trampoline perf can name
(``py::function:file``); the stack is unwound (``--call-graph dwarf``) up to the first
such trampoline, so each sample belongs to its innermost Python function, with the C it
called (the driver's Cython, a dict lookup, the kernel's part of a system call).

    # a Python 3.12 venv of lagd, the daemon started by the benchmark with the env var set
    PYTHONPERFSUPPORT=1 .venv312/bin/python -m tests.bench.bench_prefetch ... &
    perf record -e cpu-clock -F 250 --call-graph dwarf,16384 -p <daemon pid> -o lagd.data
    perf script -i lagd.data -F tid,ip,sym,dso > lagd.txt
    python -m tests.bench.perf_attr lagd.txt [--top 40]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_PY = re.compile(r"py::(?P<fn>\S+?):(?P<file>\S+) \(")
_DSO = re.compile(r"\(([^()]*)\)$")


@dataclass(frozen=True)
class Attribution:
    samples: int
    by_function: Counter[str]  # "function @file", or "<no Python frame> dso"
    by_thread: Counter[str]


def attribute(text: str) -> Attribution:
    """``perf script -F tid,ip,sym,dso`` output -> samples by innermost Python function and
    by thread. A sample with no Python frame (the interpreter's own start, a C thread) is
    named by the library its leaf is in."""
    functions: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    n = 0
    for block in text.split("\n\n"):
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        if not lines:
            continue
        n += 1
        threads[lines[0].split()[-1]] += 1
        functions[_innermost(lines[1:])] += 1
    return Attribution(n, functions, threads)


def _innermost(frames: Iterable[str]) -> str:
    frames = list(frames)
    for f in frames:
        m = _PY.search(f)
        if m:
            return f"{m['fn']} @{m['file'].rsplit('/', 1)[-1]}"
    m = _DSO.search(frames[0]) if frames else None
    return "<no Python frame> " + (m.group(1).rsplit("/", 1)[-1] if m else "?")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("script", help="perf script -F tid,ip,sym,dso output")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    with open(args.script, encoding="utf-8", errors="replace") as f:
        a = attribute(f.read())
    print(f"{a.samples} samples")
    for tid, k in a.by_thread.most_common(5):
        print(f"{100 * k / a.samples:5.1f}%  thread {tid}")
    for fn, k in a.by_function.most_common(args.top):
        print(f"{100 * k / a.samples:5.1f}%  {fn}")


if __name__ == "__main__":
    main()
