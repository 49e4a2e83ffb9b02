# Types of the optional C accelerator (_scan.c); see fingerprint.py.
from types import NotImplementedType

def fingerprint(
    sql: str, /,
) -> tuple[str, tuple[str, ...], tuple[bool, ...]] | NotImplementedType | None: ...
