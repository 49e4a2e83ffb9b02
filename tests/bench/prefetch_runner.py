"""Run only lagd's prefetch engine against a replica, in its own process.

The benchmark starts it as a child so that its CPU time is its own (read from
/proc) and it does not share a GIL with the benchmark's polling. It prints one
JSON line with the engine's snapshot when it gets SIGTERM.

    python -m tests.bench.prefetch_runner '{"host": ..., "port": ..., "user": ..., "password": ...,
        "index": ..., "pool_bytes": ..., "options": {...}}'
"""

from __future__ import annotations

import asyncio
import cProfile
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lagd.daemon import main as daemon_main
from lagd.daemon.main import tune_gc
from lagd.mysql.endpoint import Endpoint
from lagd.prefetch.rewrite import ProbeBatcher
from lagd.prefetch.service import PrefetchOptions, build_engine

# An older lagd first on PYTHONPATH (old against new code) runs on its own loop.
run_async = getattr(daemon_main, "run_async", asyncio.run)


class GateLog(logging.Handler):
    """Keeps the stall gate's transitions (lagd logs each once) for the benchmark's report."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.t0 = time.monotonic()
        self.moves: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("prefetch gate:"):
            self.moves.append((round(time.monotonic() - self.t0, 1), msg[len("prefetch gate:"):].strip()))


def thread_cpu() -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds so far per Python thread (by name; the event loop is
    MainThread): which part of lagd its CPU goes to, without a profiler's overhead."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, tuple[float, float]] = {}
    for t in threading.enumerate():
        try:
            fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended in between
            continue
        user, system = out.get(t.name, (0.0, 0.0))
        out[t.name] = (user + int(fields[11]) / tick, system + int(fields[12]) / tick)
    return out


def start(spec: dict[str, Any]) -> subprocess.Popen[str]:
    """This runner in a child process, once it says it is ready."""
    child = subprocess.Popen([sys.executable, "-m", "tests.bench.prefetch_runner", json.dumps(spec)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError("the prefetch runner did not start")
    return child


def stop(child: subprocess.Popen[str]) -> dict[str, Any] | None:
    """SIGTERM, then the engine's snapshot (the last JSON line; None without one)."""
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=30)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    snap: dict[str, Any] | None = json.loads(lines[-1]) if lines else None
    return snap


async def main(spec: dict) -> None:
    gate_log = GateLog()
    logging.getLogger("lagd").addHandler(gate_log)
    err = logging.StreamHandler(sys.stderr)  # lagd's own log lines, as the daemon would write them
    err.setFormatter(logging.Formatter("lagd %(asctime)s %(name)s %(message)s"))
    logging.getLogger("lagd").addHandler(err)
    logging.getLogger("lagd").setLevel(logging.INFO)
    if spec.get("nice"):
        os.nice(int(spec["nice"]))  # as the systemd unit's Nice= does for lagd run
    tune_gc()  # as lagd run does
    endpoint = Endpoint(spec["host"], spec["port"], spec["user"], spec["password"])
    opts = PrefetchOptions(**spec.get("options", {}))
    engine = await build_engine(
        endpoint, opts, lambda o: ProbeBatcher(max_keys=o.max_keys_per_probe),
        index=Path(spec["index"]), mariadb=True, pool_bytes=spec["pool_bytes"])
    stop = asyncio.Event()
    threads: dict[str, tuple[float, float]] = {}

    def on_signal() -> None:
        threads.update(thread_cpu())  # before the engine's threads end
        stop.set()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, on_signal)
    loop.add_signal_handler(signal.SIGINT, on_signal)
    before = thread_cpu()  # start-up (imports, connecting) is not the benchmark's to count
    print("ready", flush=True)
    await engine.run(stop)
    out = dataclasses.asdict(engine.snapshot())
    out["stall"] = engine.stall_snapshot()
    out["gate_log"] = gate_log.moves
    zero = (0.0, 0.0)
    out["thread_cpu"] = {k: [round(u - before.get(k, zero)[0], 2), round(s - before.get(k, zero)[1], 2)]
                         for k, (u, s) in threads.items()}
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    profile_to = os.environ.get("LAGD_PROFILE")  # a file for pstats: where lagd's CPU goes
    if profile_to:
        prof = cProfile.Profile()
        prof.runcall(run_async, main(json.loads(sys.argv[1])))
        prof.dump_stats(profile_to)
    else:
        run_async(main(json.loads(sys.argv[1])))
