"""Numbers the docs state about lag maths are the code's: the smoothing time
constant, the gap that restarts it, and lag.stale_after (whose table in
docs/configuration.md tests/unit/test_config.py checks against defaults.toml)."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib import resources
from pathlib import Path

from lagd.lag import LagTracker
from lagd.lag_rates import RATE_TIME_CONSTANT, SPEED_TIME_CONSTANT

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _defaults() -> dict[str, dict[str, object]]:
    return tomllib.loads(resources.files("lagd").joinpath("defaults.toml").read_text(encoding="utf-8"))


def _tracker_default(name: str) -> object:
    return inspect.signature(LagTracker.__init__).parameters[name].default


def test_lag_md_time_constant_is_the_code_s() -> None:
    text = (DOCS / "lag.md").read_text(encoding="utf-8")
    (tau,) = re.findall(r"\*\*τ = ([\d.]+) s\*\*", text)
    assert float(tau) == RATE_TIME_CONSTANT == _tracker_default("rate_time_constant")
    (speed_tau,) = re.findall(r"\*\*speed τ = ([\d.]+) s\*\*", text)
    assert float(speed_tau) == SPEED_TIME_CONSTANT
    for doc in ("metrics.md",):
        stated = {float(x) for x in re.findall(r"τ ([\d.]+) s", (DOCS / doc).read_text(encoding="utf-8"))}
        assert stated == {RATE_TIME_CONSTANT, SPEED_TIME_CONSTANT}, doc


def test_lag_md_gap_is_the_code_s() -> None:
    text = (DOCS / "lag.md").read_text(encoding="utf-8")
    gaps = {float(x) for x in re.findall(r"has not moved for more than ([\d.]+) s", text)}
    gaps |= {float(x) for x in re.findall(r"nothing is applied for more than ([\d.]+) s", text)}
    assert gaps == {_tracker_default("max_gap")}


def test_stale_after_default_is_the_same_everywhere() -> None:
    default = _defaults()["lag"]["stale_after"]
    assert _tracker_default("stale_after") == default
    text = (DOCS / "lag.md").read_text(encoding="utf-8")
    stated = re.findall(r"`lag\.stale_after`, default ([\d.]+)", text)
    assert stated and {float(x) for x in stated} == {default}
    assert {float(x) for x in re.findall(r"LagTracker\(stale_after=([\d.]+)\)", text)} <= {default}
