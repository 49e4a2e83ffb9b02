"""How often the prefetch gate would see probes pay where there were none: an A/A test.

Cold catch-ups (no lagd) are replayed through the gate's own compares: the SQL thread's
apply rate over BASE_SECONDS "alone", a grace second, JUDGE_SECONDS "with probes", then,
while control.gain_shown asks for more, a second to drain and the same again. Every
outcome that says "shown" is a false one: nothing ran. It prints the spread of one
compare's gain and how often the old rule (one compare at RAISED) and control.SHOWN
pass, from the progress the benchmark records (rows applied, every 0.26 s). Each run's
first try is replayed apart too, with and without control.YOUNG_BIAS: its speed alone
is measured in the SQL thread's first seconds.

    .venv/bin/python -m tests.bench.gate_aa RUNS.jsonl [RUNS.jsonl ...] [--step 0.5]
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections.abc import Callable

from lagd.prefetch import control

# The gain probes are made to show in the replay: none (the A/A), then real ones.
FACTORS = (1.0, 1.1, 1.2, 1.3, 1.5)


def applied_at(progress: list[list[float]]) -> Callable[[float], float]:
    times = [p[0] for p in progress]

    def at(t: float) -> float:
        return progress[max(0, bisect.bisect_right(times, t) - 1)][1]
    return at


def compare(at: Callable[[float], float], t: float, factor: float = 1.0) -> tuple[float, float]:
    """One compare from ``t``: its gain and when it ended. ``factor``: probes that sped the
    SQL thread up so much (its own unevenness kept), for the other side of the test."""
    base, grace, judged = control.BASE_SECONDS, control.GRACE_WINDOWS, control.JUDGE_SECONDS
    before = (at(t + base) - at(t)) / base
    start = t + base + grace
    after = (at(start + judged) - at(start)) / judged
    return (factor * after / before if before > 0 else 0.0), start + judged


def replay(at: Callable[[float], float], t: float, end: float, factor: float = 1.0,
           young: bool = False) -> bool | None:
    """control.SHOWN's outcome of a try started at ``t`` (None: the run ended first).
    ``young``: its first speed alone is measured in the SQL thread's first seconds
    (control.YOUNG_BIAS)."""
    gains: tuple[float, ...] = ()
    while True:
        gain, t = compare(at, t, factor)
        if t > end:
            return None
        if gain < control.SLOWER:
            return False
        gains = (*gains, gain / control.YOUNG_BIAS if young else gain)
        shown = control.gain_shown(gains)[0]
        if shown is not None:
            return shown
        young = False
        t += 1.0  # the lead drains before the SQL thread is measured alone again


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--step", type=float, default=0.5, help="seconds between two tries' starts")
    args = ap.parse_args()
    gains: list[float] = []
    outcomes: dict[float, list[bool]] = {f: [] for f in FACTORS}
    # Each run's first try, its speed alone measured from WARMUP_SECONDS on: without the
    # allowance for a pool still warming (False) and with it (True).
    firsts: dict[bool, dict[float, list[bool]]] = {y: {f: [] for f in FACTORS} for y in (False, True)}
    first_gains: list[float] = []
    runs = 0
    for path in args.runs:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("mode") != "cold" or not r.get("progress"):
                    continue
                runs += 1
                at = applied_at(r["progress"])
                first = next((p[0] for p in r["progress"] if p[1] > 0), 0.0)
                end = r["seconds"] - 2.0  # its last seconds: the backlog's tail, not its speed
                t = start = first + control.WARMUP_SECONDS
                for f in FACTORS:  # the first try with the allowance; without it, in the loop
                    outcome = replay(at, t, end, f, young=True)
                    if outcome is not None:
                        firsts[True][f].append(outcome)
                while t < end:
                    gain, done = compare(at, t)
                    if done <= end:
                        gains.append(gain)
                        if t == start:
                            first_gains.append(gain)
                    for f in FACTORS:
                        outcome = replay(at, t, end, f)
                        if outcome is not None:
                            outcomes[f].append(outcome)
                            if t == start:
                                firsts[False][f].append(outcome)
                    t += args.step
    if not gains:
        print("no cold run with its progress in these files", file=sys.stderr)
        return 1
    gains.sort()

    def pct(q: float) -> float:
        return gains[int(q * (len(gains) - 1))]
    print(f"{runs} cold runs, {len(gains)} compares of {control.JUDGE_SECONDS:g} s against"
          f" {control.BASE_SECONDS:g} s alone, {args.step:g} s apart")
    print(f"one compare's gain: 10th {pct(0.1):.2f}, median {pct(0.5):.2f}, 90th {pct(0.9):.2f},"
          f" 95th {pct(0.95):.2f}, most {gains[-1]:.2f}")
    print(f"one compare at {control.RAISED:.2f}x (the rule before SHOWN) passes"
          f" {sum(g >= control.RAISED for g in gains) / len(gains):.0%} of them")
    print(f"control.SHOWN {control.SHOWN} passes {sum(outcomes[1.0])} of {len(outcomes[1.0])} tries"
          f" ({sum(outcomes[1.0]) / max(1, len(outcomes[1.0])):.1%}) where nothing ran; where probes sped"
          " the SQL thread up by")
    for f in FACTORS[1:]:
        print(f"  {f:.2f}x: {sum(outcomes[f]) / max(1, len(outcomes[f])):.0%} of {len(outcomes[f])} tries")
    first_gains.sort()
    if first_gains:
        print(f"each run's first compare: gain {first_gains[0]:.2f}-{first_gains[-1]:.2f}x, median"
              f" {first_gains[len(first_gains) // 2]:.2f}x (its speed alone measured in the SQL thread's"
              " first seconds)")
    for young, said in ((False, "as any other"), (True, f"with control.YOUNG_BIAS {control.YOUNG_BIAS}")):
        print(f"each run's first try, judged {said}: where probes sped the SQL thread up by")
        print("  " + ", ".join(f"{f:.2f}x: {sum(o)} of {len(o)} pass" for f, o in firsts[young].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
