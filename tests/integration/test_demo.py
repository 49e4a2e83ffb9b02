"""The README's demo command runs end to end (short), and leaves nothing running."""

from __future__ import annotations

import subprocess

import pytest

from lagd.sandbox import demo


def _lagd_processes() -> set[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines()
            if "lagd run --config" in line and "lagd-demo-" in line}


def test_demo_races_both_catch_ups_and_stops_everything(capfd: pytest.CaptureFixture[str]) -> None:
    before = _lagd_processes()
    rc = demo.main(["--rows", "30000", "--rate", "200", "--backlog", "4", "--refresh", "0.5",
                    "--limit", "60"])
    out = capfd.readouterr().out
    assert rc == 0, out
    assert out.count("lagd exited with 0") == 2
    # The screen: a header and lagd's readings of both replicas, heartbeat configured.
    assert out.count("ETA  prefetch") == 1 and "(heartbeat)" in out
    assert "off: prefetch.enabled is false" in out
    assert "== summary" in out
    if "replica 0 (without prefetch) caught up" in out and "replica 1 (with prefetch) caught up" in out:
        assert "speed-up with prefetch: x" in out
    # A clean exit: lines, not the daemon's log run together.
    assert out.rstrip().endswith("nothing is left running.")
    assert " | " not in out
    assert _lagd_processes() <= before


def test_demo_eta_error_skips_the_first_seconds() -> None:
    run = demo.CatchUp("x", seconds=20.0)
    run.readings = [demo.Reading(t, "applying", 10.0, "heartbeat", 100, 2.0, 500.0, eta, "off")
                    for t, eta in ((1.0, 500.0), (4.0, 16.0), (10.0, 12.0), (19.5, 3.0))]
    # t=1 is before the first 3 s, t=19.5 has under a second left: only 4 and 10 are judged.
    assert run.eta_errors() == pytest.approx([0.0, 0.2])
