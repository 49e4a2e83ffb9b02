"""The OS name of the calling thread, so that ``top -H`` and /proc tell lagd's threads apart.

Python 3.11 names its threads for itself only: every thread of the daemon shows
as ``lagd`` in ``top -H``, ``ps -L`` and ``/proc/<pid>/task/*/comm``, and an SRE
who sees lagd at 40% of a core cannot tell the relay-log cursor from the stall
sampler. Linux keeps 15 bytes of a thread's name (``PR_SET_NAME``). Best effort:
where the call is missing or refused the thread keeps its name, nothing else
changes.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

PR_SET_NAME = 15
MAX_BYTES = 15  # the kernel's TASK_COMM_LEN, less its NUL


def os_name(name: str) -> bytes:
    """``name`` as the kernel keeps it: ASCII, cut to 15 bytes."""
    return name.encode("ascii", "replace")[:MAX_BYTES]


@functools.cache
def _prctl() -> Any:
    """libc's prctl, looked up once. Through the process's own symbols (``CDLL(None)``),
    never ``ctypes.util.find_library``: that runs ``ldconfig -p`` in a child process,
    once a call, from a thread of a daemon whose unit may forbid it."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def name_this_thread(name: str) -> bool:
    """Give the calling OS thread ``name``; False where that could not be done."""
    if not sys.platform.startswith("linux"):
        return False
    prctl = _prctl()
    if prctl is None:
        return False
    return bool(prctl(PR_SET_NAME, ctypes.c_char_p(os_name(name)), 0, 0, 0) == 0)
