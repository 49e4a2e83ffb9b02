"""The statements ``lagctl load`` runs on the source, built from the user's options.

Each chunk is ``LOAD DATA LOCAL INFILE`` of that chunk's records with the
user's FIELDS/LINES options, column list and SET, and the progress row's
UPDATE, in one transaction: the chunk and the record of it commit together
or not at all, so a restart resumes exactly after the last committed chunk.

Separator options are written as hex literals (``0x09``): no quoting rules,
and the same bytes whatever sql_mode (NO_BACKSLASH_ESCAPES) says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from lagd.errors import LagdError
from lagd.load.reader import Dialect

__all__ = ["DEFAULT_PROGRESS_TABLE", "LoadError", "LoadSpec", "Table", "load_statement", "parse_table"]

DEFAULT_PROGRESS_TABLE: Final = "lagd.load_progress"
_PART = r"(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_TABLE_RE: Final = re.compile(rf"^{_PART}\.{_PART}$")


class LoadError(LagdError):
    """Something about the load the user can fix; one line with the fix."""


@dataclass(frozen=True, slots=True)
class Table:
    schema: str
    name: str

    @property
    def quoted(self) -> str:
        return f"{ident(self.schema)}.{ident(self.name)}"

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


def ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def parse_table(text: str, what: str = "--table") -> Table:
    m = _TABLE_RE.match(text.strip())
    if m is None:
        raise LoadError(f"{what} {text!r} is not schema.table",
                        fix=f"name it with its schema, e.g. {what} shop.orders")
    schema, name = (p[1:-1].replace("``", "`") if p.startswith("`") else p for p in m.groups())
    return Table(schema, name)


def literal(b: bytes) -> str:
    return "0x" + b.hex() if b else "''"


def column_ref(name: str) -> str:
    name = name.strip()
    return name if name.startswith("@") else ident(name.strip("`"))


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What the user asked for beyond the file: duplicates, columns, SET, character set."""

    table: Table
    dialect: Dialect
    columns: tuple[str, ...] = ()  # column names and @user_variables, in file order
    set_clause: str | None = None  # raw SQL after SET, e.g. "total = @a * @b"
    duplicates: str | None = None  # None, "REPLACE" or "IGNORE"
    character_set: str | None = None

    def __post_init__(self) -> None:
        if self.duplicates not in (None, "REPLACE", "IGNORE"):
            raise LoadError(f"duplicates handling {self.duplicates!r} is neither REPLACE nor IGNORE")
        if self.character_set is not None and not re.fullmatch(r"[A-Za-z0-9_]+", self.character_set):
            raise LoadError(f"--character-set {self.character_set!r} is not a character set name",
                            fix="give a name such as utf8mb4 or latin1")


def load_statement(spec: LoadSpec, path: str) -> str:
    """The per-chunk LOAD DATA LOCAL; IGNORE n LINES is not in it (the reader skips them once)."""
    d = spec.dialect
    parts = [f"LOAD DATA LOCAL INFILE {_string(path)}"]
    if spec.duplicates:
        parts.append(spec.duplicates)
    parts.append(f"INTO TABLE {spec.table.quoted}")
    if spec.character_set:
        parts.append(f"CHARACTER SET {spec.character_set}")
    enclosed = ""
    if d.enclosed:
        enclosed = f" {'OPTIONALLY ' if d.optionally else ''}ENCLOSED BY {literal(d.enclosed)}"
    parts.append(f"FIELDS TERMINATED BY {literal(d.fields_terminated)}{enclosed} "
                 f"ESCAPED BY {literal(d.escaped)}")
    parts.append(f"LINES TERMINATED BY {literal(d.lines_terminated)}")
    if spec.columns:
        parts.append("(" + ", ".join(column_ref(c) for c in spec.columns) + ")")
    if spec.set_clause:
        parts.append(f"SET {spec.set_clause}")
    return " ".join(parts)


def _string(path: str) -> str:
    # The file name must be a plain string literal (the grammar takes no hex
    # there). It is our temporary file's path: refuse what would need quoting
    # rules that depend on sql_mode.
    if any(c in path for c in "'\\\0\n\r"):
        raise LoadError(f"temporary file path {path!r} holds a quote, backslash or control character",
                        fix="choose a --tmpdir whose path has none")
    return f"'{path}'"


# --- the progress table -----------------------------------------------------------

def progress_ddl(table: Table) -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {ident(table.schema)}",
        f"CREATE TABLE IF NOT EXISTS {table.quoted} ("
        "file_sha256 CHAR(64) NOT NULL, target VARCHAR(200) NOT NULL, file_name VARCHAR(500) NOT NULL, "
        "file_bytes BIGINT UNSIGNED NOT NULL, next_offset BIGINT UNSIGNED NOT NULL DEFAULT 0, "
        "records BIGINT UNSIGNED NOT NULL DEFAULT 0, affected_rows BIGINT UNSIGNED NOT NULL DEFAULT 0, "
        "chunks INT UNSIGNED NOT NULL DEFAULT 0, done TINYINT NOT NULL DEFAULT 0, "
        "started_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "PRIMARY KEY (file_sha256, target)) ENGINE=InnoDB",
    ]


def progress_select(table: Table) -> str:
    return (f"SELECT next_offset, records, affected_rows, chunks, done FROM {table.quoted} "
            "WHERE file_sha256 = %s AND target = %s")


def progress_insert(table: Table) -> str:
    return (f"INSERT IGNORE INTO {table.quoted} (file_sha256, target, file_name, file_bytes) "
            "VALUES (%s, %s, %s, %s)")


def progress_update(table: Table) -> str:
    # Guarded by the offset the chunk started from: a second loader racing on
    # the same file updates nothing, and the caller rolls its chunk back.
    return (f"UPDATE {table.quoted} SET next_offset = %s, records = records + %s, "
            "affected_rows = affected_rows + %s, chunks = chunks + 1, done = %s, "
            "updated_at = CURRENT_TIMESTAMP(6) WHERE file_sha256 = %s AND target = %s AND next_offset = %s")


def progress_delete(table: Table) -> str:
    return f"DELETE FROM {table.quoted} WHERE file_sha256 = %s AND target = %s"
