"""Fast constructors for the reader's frozen event types.

With the optional C accelerator, ``constructor(cls)`` returns a callable that
fills the slots directly; without it (or with LAGD_PURE_PYTHON=1) it returns
the class itself. Both build equal objects from the same positional values.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

try:
    if os.environ.get("LAGD_PURE_PYTHON"):
        raise ImportError("pure Python requested")
    from lagd.relaylog import _speedups

    ACCELERATED = True
    fast_transactions: Callable[..., tuple[int, int, int, int, int]] | None = (
        _speedups.fast_transactions
    )
except ImportError:
    _speedups = None  # type: ignore[assignment]
    ACCELERATED = False
    fast_transactions = None


def constructor(cls: type[T], accelerated: bool | None = None) -> Callable[..., T]:
    use = ACCELERATED if accelerated is None else accelerated and ACCELERATED
    if not use:
        return cls
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    fn: Callable[..., T] = _speedups.constructor(cls, names)
    return fn
