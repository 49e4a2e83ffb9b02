"""The perf-sample attribution of tests/bench/perf_attr.py, on `perf script` output
recorded from a lagd catch-up (Python 3.12, PYTHONPERFSUPPORT=1; paths shortened)."""

from __future__ import annotations

import pytest
from tests.bench.perf_attr import attribute

RECORDED = """\
10820
\t           835c6 _IO_old_init (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t          22ac2b PyUnicode_FromFormat (/usr/lib/libpython3.12.so.1.0)
\t            36bf fast_transactions (/opt/lagd/src/lagd/relaylog/_speedups.cpython-312-x86_64-linux-gnu.so)
\t          111664 _PyEval_EvalFrameDefault (/usr/lib/libpython3.12.so.1.0)
\t    7fd3bf3914f1 py::EventDecoder.decode:/opt/lagd/src/lagd/relaylog/decoder.py (/tmp/perf-10820.map)
\t    7fd3bf3917c7 py::RelayLogReader._read_some:/opt/lagd/src/lagd/relaylog/reader.py (/tmp/perf-10820.map)

10844
\t          10d2c4 _PyEval_EvalFrameDefault (/usr/lib/libpython3.12.so.1.0)
\t    7fd3bf3917c7 py::Backlog.feed:/opt/lagd/src/lagd/backlog.py (/tmp/perf-10820.map)

10820
\tffffffff813be8ed finish_task_switch.isra.0 ([kernel.kallsyms])
\tffffffff817920c5 do_epoll_wait ([kernel.kallsyms])
\t          15c01b uv__io_poll (/opt/venv/uvloop/loop.so)

10820
\t          10d2c4 _PyEval_EvalFrameDefault (/usr/lib/libpython3.12.so.1.0)
\t    7fd3bf3917c7 py::EventDecoder.decode:/opt/lagd/src/lagd/relaylog/decoder.py (/tmp/perf-10820.map)
"""


@pytest.mark.parametrize(("name", "samples"), [
    ("EventDecoder.decode @decoder.py", 2),  # the innermost Python frame, with the C it called
    ("Backlog.feed @backlog.py", 1),
    ("<no Python frame> [kernel.kallsyms]", 1),  # named by its leaf's library
    ("RelayLogReader._read_some @reader.py", 0),  # an outer frame: not this sample's
])
def test_each_sample_belongs_to_its_innermost_python_function(name: str, samples: int) -> None:
    assert attribute(RECORDED).by_function[name] == samples


def test_samples_are_counted_by_thread() -> None:
    a = attribute(RECORDED)
    assert a.samples == 4
    assert dict(a.by_thread) == {"10820": 3, "10844": 1}
    assert attribute("").samples == 0
