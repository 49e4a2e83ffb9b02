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
import ctypes.util
import sys

PR_SET_NAME = 15
MAX_BYTES = 15  # the kernel's TASK_COMM_LEN, less its NUL


def os_name(name: str) -> bytes:
    """``name`` as the kernel keeps it: ASCII, cut to 15 bytes."""
    return name.encode("ascii", "replace")[:MAX_BYTES]


def name_this_thread(name: str) -> bool:
    """Give the calling OS thread ``name``; False where that could not be done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return bool(libc.prctl(PR_SET_NAME, ctypes.c_char_p(os_name(name)), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False
