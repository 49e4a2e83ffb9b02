"""Per-table row-image decoders, generated when a table map first appears.

A row image is a NULL bitmap followed by the present columns' values. The
reader needs only a few of them (key and indexed columns), so each table gets
a straight-line function that unpacks those and hops over the rest by their
length: a fixed width is folded into the next offset, a variable one costs a
single length read. This is what lets pure Python decode >100k rows/s where a
general per-value decoder manages a few thousand.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from lagd.relaylog import _columns as c
from lagd.relaylog._tablemap import TableMap
from lagd.relaylog.events import TableInfo

ImageDecoder = Callable[[bytes, int], tuple[tuple[object, ...], int]]

_INT_CODES = {c.T_TINY: "b", c.T_SHORT: "h", c.T_LONG: "i", c.T_LONGLONG: "q"}
_FLOAT_CODES = {c.T_FLOAT: "f", c.T_DOUBLE: "d"}
_HELPERS: dict[int, Callable[[bytes, int, int], object]] = {
    c.T_NEWDECIMAL: c.decode_newdecimal,
    c.T_DATETIME2: c.decode_datetime2,
    c.T_TIMESTAMP2: c.decode_timestamp2,
    c.T_TIME2: c.decode_time2,
    c.T_DATE: c.decode_date,
    c.T_NEWDATE: c.decode_date,
    c.T_DATETIME: c.decode_datetime,
    c.T_TIME: c.decode_time,
    c.T_TIMESTAMP: c.decode_timestamp,
    c.T_BIT: c.decode_bit,
    c.T_FLOAT: c.decode_float,
}


def _struct_code(tm: TableMap, col: int, unsigned: bool) -> str | None:
    t = tm.real_type(col)
    if t in _INT_CODES:
        code = _INT_CODES[t]
        return code.upper() if unsigned else code
    if t == c.T_DOUBLE:
        return "d"
    if t == c.T_FLOAT and tm.metas[col] in (0, 4):
        return "f"
    return None


class _Gen:
    """Accumulates generated source lines and the constants they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {"_from_bytes": int.from_bytes}
        self.pending_skip = 0

    def const(self, value: object) -> str:
        name = f"_k{len(self.ns)}"
        self.ns[name] = value
        return name

    def flush_skip(self, indent: str) -> None:
        if self.pending_skip:
            self.lines.append(f"{indent}pos += {self.pending_skip}")
            self.pending_skip = 0


def compile_image_decoder(tm: TableMap, info: TableInfo, present: tuple[int, ...]) -> ImageDecoder:
    """Build ``decode(buf, pos) -> (values, new_pos)`` for one row image.

    ``present`` lists the ordinals logged in this image (all of them under
    binlog_row_image=FULL). Values come back aligned with ``info.needed``;
    a needed column that is not present decodes as None.
    """
    needed = set(info.needed)
    g = _Gen()
    nb = (len(present) + 7) // 8
    body: list[str] = []
    g.lines = body
    if nb == 1:
        body.append("    nulls = buf[pos]")
    elif nb:
        body.append(f"    nulls = _from_bytes(buf[pos:pos + {nb}], 'little')")
    body.append(f"    pos += {nb}")
    out_var = {col: f"v{col}" for col in info.needed}
    # Runs of NOT NULL fixed-width numeric columns become one struct.unpack.
    run_fmt: list[str] = []
    run_vars: list[str] = []

    def flush_run() -> None:
        if not run_fmt:
            return
        fmt = "<" + "".join(run_fmt)
        st = g.const(struct.Struct(fmt))
        size = struct.calcsize(fmt)
        if run_vars:
            targets = ", ".join(run_vars) + ("," if len(run_vars) == 1 else "")
            body.append(f"    {targets} = {st}.unpack_from(buf, pos)")
        body.append(f"    pos += {size}")
        run_fmt.clear()
        run_vars.clear()

    for bit, col in enumerate(present):
        t = tm.real_type(col)
        meta = tm.metas[col]
        lay = c.layout(tm.types[col], meta)
        want = col in needed
        unsigned = info.columns[col].unsigned
        nullable = tm.nullable[col]
        code = _struct_code(tm, col, unsigned)
        if not nullable and lay.fixed is not None and (code or not want):
            # Foldable into a struct run: unpack if wanted, pad if not.
            if want and code:
                run_fmt.append(code)
                run_vars.append(out_var[col])
            else:
                run_fmt.append(f"{lay.fixed}x" if lay.fixed else "")
            continue
        flush_run()
        ind = "    "
        if nullable:
            mask = 1 << bit
            if want:
                body.append(f"    if nulls & {mask}:")
                body.append(f"        {out_var[col]} = None")
                body.append("    else:")
            else:
                body.append(f"    if not nulls & {mask}:")
            ind = "        "
        before = len(body)
        _emit_value(g, body, ind, tm, info, col, t, lay, want, out_var.get(col))
        if len(body) == before:
            body.append(f"{ind}pass")
    flush_run()
    for col in info.needed:
        if col not in present:
            body.insert(0, f"    {out_var[col]} = None")
    values = ", ".join(out_var[col] for col in info.needed)
    body.append(f"    return ({values}{',' if len(info.needed) == 1 else ''}), pos")
    src = "def decode(buf, pos):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<rowcodec {tm.qualified}>", "exec"), g.ns)  # noqa: S102 - generated from typed metadata only
    fn: ImageDecoder = g.ns["decode"]
    fn.__doc__ = src  # keeps the generated code inspectable when debugging
    return fn


def _emit_value(
    g: _Gen, body: list[str], ind: str, tm: TableMap, info: TableInfo, col: int, t: int,
    lay: c.Layout, want: bool, var: str | None,
) -> None:
    meta = tm.metas[col]
    unsigned = info.columns[col].unsigned
    if lay.fixed is not None:
        if not want:
            body.append(f"{ind}pos += {lay.fixed}")
            return
        code = _struct_code(tm, col, unsigned)
        if code:
            st = g.const(struct.Struct("<" + code))
            body.append(f"{ind}{var} = {st}.unpack_from(buf, pos)[0]")
        elif t == c.T_INT24:
            body.append(f"{ind}{var} = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)")
            if not unsigned:
                body.append(f"{ind}if {var} & 0x800000: {var} -= 0x1000000")
        elif t == c.T_YEAR:
            body.append(f"{ind}{var} = buf[pos] + 1900 if buf[pos] else 0")
        elif t in (c.T_ENUM, c.T_SET):
            # The number the server stores (an ENUM's 1-based index, a SET's bit mask), not
            # the label FULL metadata would give: a probe naming an ENUM by its label in a
            # row constructor, `(status, id) IN (('paid', 7))`, is a scan of the whole
            # index on MariaDB 10.11 (EXPLAIN: type index, 20,000 rows of 20,000), by its
            # number a range of one row. And the same value whatever the metadata.
            body.append(f"{ind}{var} = _from_bytes(buf[pos:pos + {lay.fixed}], 'little')")
        elif t == c.T_NULL:
            body.append(f"{ind}{var} = None")
        else:
            helper = _HELPERS.get(t)
            if helper is None:
                raise ValueError(f"no decoder for column type {c.TYPE_NAMES.get(t, t)}")
            fn = g.const(helper)
            body.append(f"{ind}{var} = {fn}(buf, pos, {meta})")
        body.append(f"{ind}pos += {lay.fixed}")
        return
    # Variable length: a little-endian length prefix, then the bytes.
    if lay.prefix == 1:
        length = "buf[pos]"
    elif lay.prefix == 2:
        length = "(buf[pos] | (buf[pos + 1] << 8))"
    else:
        length = f"_from_bytes(buf[pos:pos + {lay.prefix}], 'little')"
    if not want:
        body.append(f"{ind}pos += {lay.prefix} + {length}")
        return
    body.append(f"{ind}n = {length}")
    body.append(f"{ind}{var} = buf[pos + {lay.prefix}:pos + {lay.prefix} + n]")
    codec = info.columns[col].charset
    if codec and t not in (c.T_JSON, c.T_GEOMETRY, c.T_VECTOR):
        body.append(f"{ind}{var} = {var}.decode({codec!r}, 'surrogateescape')")
    elif t == c.T_STRING:
        # BINARY(n) is logged with its trailing zero bytes cut; a probe needs them back.
        width = c.real_type(tm.types[col], meta)[1]
        body.append(f"{ind}{var} = {var}.ljust({width}, b'\\x00')")
    body.append(f"{ind}pos += {lay.prefix} + n")


def skip_layout(tm: TableMap, present: tuple[int, ...]) -> bytes | None:
    """How to step over one row image without decoding it, for the C reader
    (_speedups.c ``skip_image``): two bytes a logged column, whether it is
    nullable (its NULL bit then counts) and its width (under 240 bytes) or 240
    plus the bytes of its length prefix. None where a width does not fit: such
    images are then decoded by ``compile_image_decoder``'s function."""
    out = bytearray()
    for col in present:
        width = _skip_width(c.layout(tm.types[col], tm.metas[col]))
        if width is None:
            return None
        out += bytes((1 if tm.nullable[col] else 0, width))
    return bytes(out)


def _skip_width(lay: c.Layout) -> int | None:
    """A column's width byte in a C layout: under 240 its fixed width, else 240 plus its
    length prefix's bytes; None for a fixed width too large for that byte."""
    if lay.fixed is None:
        return 240 + lay.prefix
    return lay.fixed if lay.fixed < 240 else None


# Integer columns the C reader decodes itself: their width in a row image.
_INT_WIDTHS = {c.T_TINY: 1, c.T_SHORT: 2, c.T_INT24: 3, c.T_LONG: 4, c.T_LONGLONG: 8}
VALUE_NULLABLE, VALUE_WANTED, VALUE_UNSIGNED = 1, 2, 4


def value_layout(tm: TableMap, info: TableInfo, present: tuple[int, ...]) -> bytes | None:
    """The C reader's recipe for one row image whose needed columns are all integers
    (``_speedups.c`` ``values_image``): the number of needed columns, then three bytes
    a logged column: flags (nullable, wanted, unsigned), its width as in
    ``skip_layout``, and for a wanted column its place among ``info.needed``. The values
    are those ``compile_image_decoder``'s function gives, without a Python call a
    row image. None where a needed column is not an integer (a string key, a date) or
    a width does not fit: such images keep the generated function."""
    needed = {col: i for i, col in enumerate(info.needed)}
    if len(needed) > 255:
        return None
    out = bytearray((len(needed),))
    for col in present:
        lay = c.layout(tm.types[col], tm.metas[col])
        flags = VALUE_NULLABLE if tm.nullable[col] else 0
        slot = needed.get(col)
        if slot is not None:
            width = _INT_WIDTHS.get(tm.real_type(col))
            if width is None or lay.fixed != width:
                return None
            flags |= VALUE_WANTED | (VALUE_UNSIGNED if info.columns[col].unsigned else 0)
        else:
            width = _skip_width(lay)
            if width is None:
                return None
        out += bytes((flags, width, slot or 0))
    return bytes(out)
