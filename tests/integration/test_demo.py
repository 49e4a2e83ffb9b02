"""The README's demo command runs end to end (short), and leaves nothing running."""

from __future__ import annotations

import subprocess

from lagd.sandbox import demo


def _lagd_processes() -> set[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines()
            if "lagd run --config" in line and "lagd-demo-" in line}


def test_demo_runs_the_daemon_and_status_and_stops_everything(capfd):
    before = _lagd_processes()
    rc = demo.main(["--seconds", "14", "--rows", "30000", "--rate", "300", "--stall", "4", "--period", "8",
                    "--refresh", "2"])
    out = capfd.readouterr().out
    assert rc == 0
    assert "servers stopped." in out
    assert "lagd exited with 0" in out
    # lagctl status printed screens from the daemon: the verdict line and the lag methods.
    assert out.count("event_time") >= 2
    assert any(word in out for word in ("OK:", "WARNING:", "CRITICAL:", "UNKNOWN:"))
    assert _lagd_processes() <= before
