"""lagd's nice value given to its autogroup (daemon/autogroup.py)."""

from __future__ import annotations

import pytest

from lagd.daemon import autogroup


@pytest.mark.parametrize(("own", "leader", "group", "expected"), [
    (10, True, 0, 10),  # a service: its session is its own
    (10, False, 0, None),  # a foreground run: the shell's session is not lagd's to lower
    (10, True, 10, None),  # set already
    (10, True, 15, None),  # lower already: never raised back
    (0, True, 0, None),  # run at the server's priority on purpose
    (10, True, None, None),  # no autogroup in this kernel
])
def test_the_groups_nice_value(own: int, leader: bool, group: int | None, expected: int | None) -> None:
    assert autogroup.wanted(own, leader, group) == expected


def test_the_autogroup_file_is_read() -> None:
    assert autogroup.group_nice("/autogroup-537 nice 0\n") == 0
    assert autogroup.group_nice("/autogroup-9 nice -5\n") == -5


def test_a_service_gives_its_group_its_nice_value_once(caplog: pytest.LogCaptureFixture) -> None:
    files = {autogroup.AUTOGROUP: "/autogroup-537 nice 0\n"}

    def write(path: str, text: str) -> None:
        files[path] = f"/autogroup-537 nice {text}\n"

    with caplog.at_level("INFO", logger="lagd.daemon"):
        assert autogroup.share_nice(read=files.__getitem__, write=write, own_nice=lambda: 10,
                                    leader=lambda: True) == 10
        assert autogroup.share_nice(read=files.__getitem__, write=write, own_nice=lambda: 10,
                                    leader=lambda: True) is None
    assert files[autogroup.AUTOGROUP] == "/autogroup-537 nice 10\n"
    assert caplog.text.count("autogroup) at nice 10") == 1


def test_a_refused_write_is_said_and_lagd_runs_on(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(path: str, text: str) -> None:
        raise PermissionError(13, "Permission denied")

    with caplog.at_level("INFO", logger="lagd.daemon"):
        assert autogroup.share_nice(read=lambda p: "/autogroup-1 nice 0", write=refuse, own_nice=lambda: 10,
                                    leader=lambda: True) is None
    assert "its nice value 10 ([Errno 13] Permission denied)" in caplog.text


def test_without_autogroup_nothing_is_written() -> None:
    def missing(path: str) -> str:
        raise FileNotFoundError(path)

    def never(path: str, text: str) -> None:
        raise AssertionError("written")

    assert autogroup.share_nice(read=missing, write=never, own_nice=lambda: 10, leader=lambda: True) is None
