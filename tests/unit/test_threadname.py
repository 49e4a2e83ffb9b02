"""The OS name of a thread: what ``top -H`` shows for lagd's threads."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from lagd.threadname import name_this_thread, os_name


@pytest.mark.parametrize(("name", "kept"), [
    ("lagd-cursor", b"lagd-cursor"),
    ("lagd-stall", b"lagd-stall"),
    ("lagd-prefetch-cursor", b"lagd-prefetch-c"),  # the kernel keeps 15 bytes
    ("lagd-é", b"lagd-?"),
])
def test_os_name(name: str, kept: bytes) -> None:
    assert os_name(name) == kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux names threads by prctl")
def test_the_thread_is_named_in_proc() -> None:
    seen: list[str] = []

    def body() -> None:
        assert name_this_thread("lagd-test-name")
        seen.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == ["lagd-test-name"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux names threads by prctl")
def test_naming_a_thread_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocking queries name a fresh thread each; ctypes.util.find_library would run
    ldconfig in a child process every time."""
    import subprocess  # noqa: PLC0415 - patched only here

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", refused)
    monkeypatch.setattr(subprocess, "run", refused)
    named: list[bool] = []
    for _ in range(3):  # each in a thread of its own, as lagd-blocking's are
        t = threading.Thread(target=lambda: named.append(name_this_thread("lagd-test-name")))
        t.start()
        t.join()
    assert named == [True, True, True]
