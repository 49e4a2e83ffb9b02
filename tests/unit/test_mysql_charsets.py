"""Collation ids and character-set names to Python codecs."""

from __future__ import annotations

import codecs

import pytest

from lagd.mysql import charsets
from lagd.mysql.charsets import codec_for_charset, codec_for_collation

COLLATIONS = [
    ("binary", 63, None),
    ("none", None, None),
    ("latin1_swedish_ci-is-cp1252", 8, "cp1252"),
    ("utf8mb3_general_ci", 33, "utf-8"),
    ("utf8mb4_general_ci", 45, "utf-8"),
    ("utf8mb4_unicode_520_ci", 246, "utf-8"),
    ("mysql8-utf8mb4_0900_ai_ci", 255, "utf-8"),
    ("mariadb11-uca1400", 2048, "utf-8"),
    ("ucs2_general_ci", 35, "utf-16-be"),
    ("utf16le_general_ci", 56, "utf-16-le"),
    ("utf32_general_ci", 60, "utf-32-be"),
    ("koi8r", 7, "koi8-r"),
    ("sjis", 13, "shift_jis"),
    ("mysql-gb18030", 248, "gb18030"),
    ("dec8-has-no-python-codec", 3, None),
    ("armscii8-has-no-python-codec", 32, None),
]


@pytest.mark.parametrize(("collation", "want"), [c[1:] for c in COLLATIONS], ids=[c[0] for c in COLLATIONS])
def test_codec_for_collation(collation: int | None, want: str | None) -> None:
    assert codec_for_collation(collation) == want


@pytest.mark.parametrize(("name", "want"), [
    ("latin1", "cp1252"), ("utf8mb4", "utf-8"), ("utf8", "utf-8"), ("UTF8MB3", "utf-8"), ("binary", None),
    (None, None), ("", None), ("swe7", None), ("a_future_set", "utf-8"),
])
def test_codec_for_charset(name: str | None, want: str | None) -> None:
    assert codec_for_charset(name) == want


def test_every_codec_is_one_python_has() -> None:
    for collation in range(0, 2100):
        codec = codec_for_collation(collation)
        if codec is not None:
            codecs.lookup(codec)


def test_no_collation_id_belongs_to_two_sets() -> None:
    seen: dict[int, str] = {}
    for name, ranges in charsets._COLLATIONS.items():
        for first, last in ranges:
            for i in range(first, last + 1):
                assert i not in seen, f"{i} is {seen[i]} and {name}"
                seen[i] = name
