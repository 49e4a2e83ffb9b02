"""TABLE_MAP_EVENT bodies -> TableMap, including optional metadata.

With ``binlog_row_metadata=FULL`` the source writes column names, primary
key, signedness and collations here, so the reader needs no round trip to
the server. Secondary indexes are never in the log: they come from
information_schema (see ``schema.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lagd.relaylog import _columns as c
from lagd.relaylog._wire import U32, WireError, packed_int

# Both servers refuse tables wider than this: a larger count is damage.
MAX_COLUMNS = 4096

# Optional metadata field types (MySQL's Table_map_log_event::Optional_metadata_field_type).
_SIGNEDNESS = 1
_DEFAULT_CHARSET = 2
_COLUMN_CHARSET = 3
_COLUMN_NAME = 4
_SET_STR_VALUE = 5
_ENUM_STR_VALUE = 6
_GEOMETRY_TYPE = 7
_SIMPLE_PRIMARY_KEY = 8
_PRIMARY_KEY_WITH_PREFIX = 9
_ENUM_AND_SET_DEFAULT_CHARSET = 10
_ENUM_AND_SET_COLUMN_CHARSET = 11
_COLUMN_VISIBILITY = 12


@dataclass(frozen=True, slots=True)
class TableMap:
    table_id: int
    schema: str
    table: str
    types: tuple[int, ...]
    metas: tuple[int, ...]
    nullable: tuple[bool, ...]
    names: tuple[str, ...] | None = None
    unsigned: tuple[bool, ...] | None = None  # per column; None when not logged
    collations: tuple[int | None, ...] | None = None  # per column; None = not text / unknown
    primary_key: tuple[int, ...] | None = None
    pk_prefixes: tuple[int | None, ...] | None = None
    enum_values: dict[int, tuple[str, ...]] = field(default_factory=dict, compare=False)
    set_values: dict[int, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @property
    def column_count(self) -> int:
        return len(self.types)

    def real_type(self, i: int) -> int:
        return c.real_type(self.types[i], self.metas[i])[0]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"


def _bits_msb(buf: bytes, pos: int, end: int, count: int) -> list[bool]:
    out = []
    for i in range(count):
        byte = pos + i // 8
        out.append(byte < end and bool(buf[byte] & (0x80 >> (i % 8))))
    return out


def parse_table_map(buf: bytes, pos: int, end: int, table_id_len: int) -> TableMap:
    """Parse a table map body (``pos`` just after the common header)."""
    if table_id_len == 6:
        table_id = U32.unpack_from(buf, pos)[0] | (buf[pos + 4] << 32) | (buf[pos + 5] << 40)
    else:
        table_id = U32.unpack_from(buf, pos)[0]
    pos += table_id_len + 2  # + flags
    slen = buf[pos]
    schema = buf[pos + 1 : pos + 1 + slen].decode("utf-8", "replace")
    pos += slen + 2
    tlen = buf[pos]
    table = buf[pos + 1 : pos + 1 + tlen].decode("utf-8", "replace")
    pos += tlen + 2
    ncols, pos = packed_int(buf, pos)
    if not 0 < ncols <= MAX_COLUMNS:
        raise WireError(f"table map with {ncols} columns")
    if pos + ncols > end:
        raise WireError("table map column types run past the event")
    types = tuple(buf[pos : pos + ncols])
    pos += ncols
    meta_len, pos = packed_int(buf, pos)
    meta_end = pos + meta_len
    metas = []
    for t in types:
        m, pos = c.read_metadata(t, buf, pos)
        metas.append(m)
    if pos != meta_end:
        used = pos - meta_end + meta_len
        raise WireError(f"table map metadata is {meta_len} bytes but the column types use {used}")
    nbytes = (ncols + 7) // 8
    null_bits = int.from_bytes(buf[pos : pos + nbytes], "little")
    nullable = tuple(bool(null_bits & (1 << i)) for i in range(ncols))
    pos += nbytes
    tm = TableMap(table_id, schema, table, types, tuple(metas), nullable)
    if pos < end:
        tm = _optional_metadata(tm, buf, pos, end)
    return tm


def _optional_metadata(tm: TableMap, buf: bytes, pos: int, end: int) -> TableMap:
    n = tm.column_count
    real = [tm.real_type(i) for i in range(n)]
    numeric = [i for i in range(n) if real[i] in c.NUMERIC_TYPES]
    character = [i for i in range(n) if real[i] in c.CHARACTER_TYPES]
    enum_set = [i for i in range(n) if real[i] in (c.T_ENUM, c.T_SET)]
    names: list[str] | None = None
    unsigned: list[bool] | None = None
    collations: list[int | None] = [None] * n
    have_collations = False
    pk: list[int] | None = None
    prefixes: list[int | None] | None = None
    enum_values: dict[int, tuple[str, ...]] = {}
    set_values: dict[int, tuple[str, ...]] = {}

    def charset_list(p: int, stop: int, cols: list[int], default: bool) -> None:
        nonlocal have_collations
        have_collations = True
        if default:
            dflt, p = packed_int(buf, p)
            for col in cols:
                collations[col] = dflt
            while p < stop:
                idx, p = packed_int(buf, p)
                coll, p = packed_int(buf, p)
                if idx < len(cols):
                    collations[cols[idx]] = coll
        else:
            for col in cols:
                if p >= stop:
                    break
                coll, p = packed_int(buf, p)
                collations[col] = coll

    def str_values(p: int, stop: int, cols: list[int], into: dict[int, tuple[str, ...]]) -> None:
        for col in cols:
            if p >= stop:
                break
            count, p = packed_int(buf, p)
            if count > stop - p:  # each value takes at least its length byte
                raise WireError(f"{count} ENUM/SET values in {stop - p} bytes")
            vals = []
            for _ in range(count):
                ln, p = packed_int(buf, p)
                if p + ln > stop:
                    raise WireError("ENUM/SET value runs past its metadata field")
                vals.append(buf[p : p + ln].decode("utf-8", "replace"))
                p += ln
            into[col] = tuple(vals)

    while pos < end:
        ftype = buf[pos]
        flen, pos = packed_int(buf, pos + 1)
        stop = pos + flen
        if stop > end:
            raise WireError("optional metadata field runs past the event")
        if ftype == _SIGNEDNESS:
            bits = _bits_msb(buf, pos, stop, len(numeric))
            unsigned = [False] * n
            for col, bit in zip(numeric, bits, strict=True):
                unsigned[col] = bit
        elif ftype == _DEFAULT_CHARSET:
            charset_list(pos, stop, character, True)
        elif ftype == _COLUMN_CHARSET:
            charset_list(pos, stop, character, False)
        elif ftype == _ENUM_AND_SET_DEFAULT_CHARSET:
            charset_list(pos, stop, enum_set, True)
        elif ftype == _ENUM_AND_SET_COLUMN_CHARSET:
            charset_list(pos, stop, enum_set, False)
        elif ftype == _COLUMN_NAME:
            names = []
            p = pos
            while p < stop:
                ln, p = packed_int(buf, p)
                names.append(buf[p : p + ln].decode("utf-8", "replace"))
                p += ln
        elif ftype == _SIMPLE_PRIMARY_KEY:
            pk = []
            p = pos
            while p < stop:
                col, p = packed_int(buf, p)
                pk.append(col)
            prefixes = [None] * len(pk)
        elif ftype == _PRIMARY_KEY_WITH_PREFIX:
            pk, prefixes = [], []
            p = pos
            while p < stop:
                col, p = packed_int(buf, p)
                plen, p = packed_int(buf, p)
                pk.append(col)
                prefixes.append(plen or None)
        elif ftype == _ENUM_STR_VALUE:
            str_values(pos, stop, [i for i in enum_set if real[i] == c.T_ENUM], enum_values)
        elif ftype == _SET_STR_VALUE:
            str_values(pos, stop, [i for i in enum_set if real[i] == c.T_SET], set_values)
        # GEOMETRY_TYPE, COLUMN_VISIBILITY and newer fields do not matter to probes.
        pos = stop
    if names is not None and len(names) != n:
        names = None  # a partial list would mislabel columns; fall back to the server
    return TableMap(
        tm.table_id, tm.schema, tm.table, tm.types, tm.metas, tm.nullable,
        names=tuple(names) if names is not None else None,
        unsigned=tuple(unsigned) if unsigned is not None else None,
        collations=tuple(collations) if have_collations else None,
        primary_key=tuple(pk) if pk is not None else None,
        pk_prefixes=tuple(prefixes) if prefixes is not None else None,
        enum_values=enum_values,
        set_values=set_values,
    )
