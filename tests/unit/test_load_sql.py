"""The per-chunk statement and the CLI's option parsing: tables of options -> SQL."""

from __future__ import annotations

import pytest

from lagd.cli.load import _dialect, unescape
from lagd.load.reader import Dialect
from lagd.load.sql import LoadError, LoadSpec, Table, load_statement, parse_table


@pytest.mark.parametrize(("text", "table"), [
    ("shop.orders", Table("shop", "orders")),
    ("`my db`.`a``b`", Table("my db", "a`b")),
    (" s.t ", Table("s", "t")),
])
def test_parse_table(text: str, table: Table) -> None:
    assert parse_table(text) == table


@pytest.mark.parametrize("text", ["orders", "a.b.c", "", "a."])
def test_parse_table_refuses(text: str) -> None:
    with pytest.raises(LoadError, match=r"not schema\.table"):
        parse_table(text)


@pytest.mark.parametrize(("spec", "sql"), [
    (LoadSpec(Table("s", "t"), Dialect()),
     "LOAD DATA LOCAL INFILE '/var/chunks/c' INTO TABLE `s`.`t` FIELDS TERMINATED BY 0x09 ESCAPED BY 0x5c "
     "LINES TERMINATED BY 0x0a"),
    (LoadSpec(Table("s", "t"), Dialect(b",", b'"', True, b"", b"\r\n", ignore_lines=1), ("id", "@x"),
              "n = @x * 2", "REPLACE", "utf8mb4"),
     "LOAD DATA LOCAL INFILE '/var/chunks/c' REPLACE INTO TABLE `s`.`t` CHARACTER SET utf8mb4 "
     "FIELDS TERMINATED BY 0x2c OPTIONALLY ENCLOSED BY 0x22 ESCAPED BY '' "
     "LINES TERMINATED BY 0x0d0a (`id`, @x) SET n = @x * 2"),
])
def test_load_statement(spec: LoadSpec, sql: str) -> None:
    assert load_statement(spec, "/var/chunks/c") == sql


def test_load_statement_refuses_a_path_needing_quotes() -> None:
    with pytest.raises(LoadError, match="--tmpdir"):
        load_statement(LoadSpec(Table("s", "t"), Dialect()), "/var/it's")


@pytest.mark.parametrize(("text", "out"), [("\\t", b"\t"), ("\\r\\n", b"\r\n"), (",", b","), ("", b""),
                                           ("\\\\", b"\\"), ("|\\0", b"|\0")])
def test_unescape(text: str, out: bytes) -> None:
    assert unescape(text, "--x") == out


def test_unescape_refuses_unknown() -> None:
    with pytest.raises(LoadError, match="unknown escape"):
        unescape("\\q", "--fields-terminated-by")


def test_dialect_from_options() -> None:
    assert _dialect("csv", None, None, None, None, None, 0) == Dialect(b",", b'"', True, b"\\", b"\n")
    d = _dialect("tsv", ";", '"', None, "", "\\r\\n", 2)
    assert d == Dialect(b";", b'"', False, b"", b"\r\n", 2)
    with pytest.raises(LoadError, match="both given"):
        _dialect("tsv", None, '"', '"', None, None, 0)
    with pytest.raises(LoadError, match="must not be empty"):
        _dialect("tsv", None, None, None, None, "", 0)
