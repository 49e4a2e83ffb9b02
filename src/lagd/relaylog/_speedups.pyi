# Types of the optional C accelerator (_speedups.c); see _construct.py.
from collections.abc import Callable
from typing import Any

def constructor(cls: type[Any], names: tuple[str, ...]) -> Callable[..., Any]: ...
def fast_transactions(
    buf: bytes, pos: int, end: int, base: int, crc_len: int, verify: bool, tid_len: int,
    query_ph: int, definitions: dict[int, Any], file: str, source_file: str | None,
    out: list[Any], new_start: Callable[..., Any], new_end: Callable[..., Any],
    new_row: Callable[..., Any], new_rq: Callable[..., Any], kinds: tuple[Any, Any, Any],
    new_statement: Callable[..., Any], values: bool, /,
) -> tuple[int, int, int, int, int]: ...
