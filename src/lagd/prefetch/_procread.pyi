# Types of the optional C accelerator (_procread.c); see stall.py.

MAX_CELLS: int  # files times samples one call reads at most

def read_batch(
    fds: tuple[int, ...], n: int, interval: float, /,
) -> list[tuple[float, tuple[str | None, ...]]]: ...
