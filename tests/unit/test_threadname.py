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
