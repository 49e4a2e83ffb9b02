"""Which Python codec decodes a column, from its collation id or character-set name.

A table rather than a driver's: the relay-log reader needs it without a
connection (and without importing a driver), and drivers list only the
character sets a client may use, leaving out ucs2, utf16 and utf32, which
columns can have. The ids are MariaDB 10.11's ``information_schema.COLLATIONS``
(MySQL shares them below 248) plus MySQL's gb18030; ids newer than the table
are utf8mb4 collations on both servers (MySQL 8 from 255, MariaDB 11 from
2048), so an unknown id reads as UTF-8.
"""

from __future__ import annotations

import codecs
from typing import Final

BINARY_COLLATION: Final = 63

# character set -> ((first id, last id), ...)
_COLLATIONS: Final[dict[str, tuple[tuple[int, int], ...]]] = {
    "big5": ((1, 1), (84, 84), (1025, 1025), (1108, 1108)),
    "latin2": ((2, 2), (9, 9), (21, 21), (27, 27), (77, 77), (1033, 1033), (1101, 1101)),
    "dec8": ((3, 3), (69, 69), (1027, 1027), (1093, 1093)),
    "cp850": ((4, 4), (80, 80), (1028, 1028), (1104, 1104)),
    "latin1": ((5, 5), (8, 8), (15, 15), (31, 31), (47, 49), (94, 94), (1032, 1032), (1071, 1071)),
    "hp8": ((6, 6), (72, 72), (1030, 1030), (1096, 1096)),
    "koi8r": ((7, 7), (74, 74), (1031, 1031), (1098, 1098)),
    "swe7": ((10, 10), (82, 82), (1034, 1034), (1106, 1106)),
    "ascii": ((11, 11), (65, 65), (1035, 1035), (1089, 1089)),
    "ujis": ((12, 12), (91, 91), (1036, 1036), (1115, 1115)),
    "sjis": ((13, 13), (88, 88), (1037, 1037), (1112, 1112)),
    "cp1251": ((14, 14), (23, 23), (50, 52), (1074, 1075)),
    "hebrew": ((16, 16), (71, 71), (1040, 1040), (1095, 1095)),
    "tis620": ((18, 18), (89, 89), (1042, 1042), (1113, 1113)),
    "euckr": ((19, 19), (85, 85), (1043, 1043), (1109, 1109)),
    "latin7": ((20, 20), (41, 42), (79, 79), (1065, 1065), (1103, 1103)),
    "koi8u": ((22, 22), (75, 75), (1046, 1046), (1099, 1099)),
    "gb2312": ((24, 24), (86, 86), (1048, 1048), (1110, 1110)),
    "greek": ((25, 25), (70, 70), (1049, 1049), (1094, 1094)),
    "cp1250": ((26, 26), (34, 34), (44, 44), (66, 66), (99, 99), (1050, 1050), (1090, 1090)),
    "gbk": ((28, 28), (87, 87), (1052, 1052), (1111, 1111)),
    "cp1257": ((29, 29), (58, 59), (1082, 1083)),
    "latin5": ((30, 30), (78, 78), (1054, 1054), (1102, 1102)),
    "armscii8": ((32, 32), (64, 64), (1056, 1056), (1088, 1088)),
    "utf8mb3": ((33, 33), (76, 76), (83, 83), (192, 215), (223, 223), (576, 578), (1057, 1057),
                (1107, 1107), (1216, 1216), (1238, 1238)),
    "ucs2": ((35, 35), (90, 90), (128, 151), (159, 159), (640, 642), (1059, 1059), (1114, 1114),
             (1152, 1152), (1174, 1174)),
    "cp866": ((36, 36), (68, 68), (1060, 1060), (1092, 1092)),
    "keybcs2": ((37, 37), (73, 73), (1061, 1061), (1097, 1097)),
    "macce": ((38, 38), (43, 43), (1062, 1062), (1067, 1067)),
    "macroman": ((39, 39), (53, 53), (1063, 1063), (1077, 1077)),
    "cp852": ((40, 40), (81, 81), (1064, 1064), (1105, 1105)),
    "utf8mb4": ((45, 46), (224, 247), (608, 610), (1069, 1070), (1248, 1248), (1270, 1270)),
    "utf16": ((54, 55), (101, 124), (672, 674), (1078, 1079), (1125, 1125), (1147, 1147)),
    "utf16le": ((56, 56), (62, 62), (1080, 1080), (1086, 1086)),
    "cp1256": ((57, 57), (67, 67), (1081, 1081), (1091, 1091)),
    "utf32": ((60, 61), (160, 183), (736, 738), (1084, 1085), (1184, 1184), (1206, 1206)),
    "binary": ((63, 63),),
    "geostd8": ((92, 93), (1116, 1117)),
    "cp932": ((95, 96), (1119, 1120)),
    "eucjpms": ((97, 98), (1121, 1122)),
    "gb18030": ((248, 250),),  # MySQL only
}

_BY_ID: Final[dict[int, str]] = {
    i: name for name, ranges in _COLLATIONS.items() for first, last in ranges for i in range(first, last + 1)
}

# Server character set -> Python codec, where the names differ. MySQL's
# latin1 is really cp1252. Sets Python has no codec for (dec8, hp8, swe7,
# armscii8, keybcs2, geostd8) are left as bytes: a wrong decoding would make
# a key that matches nothing.
_CODEC: Final[dict[str, str | None]] = {
    "binary": None, "latin1": "cp1252", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "utf8": "utf-8",
    "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    "koi8r": "koi8_r", "koi8u": "koi8_u", "ujis": "euc_jp", "eucjpms": "euc_jp", "sjis": "shift_jis",
    "euckr": "euc_kr", "hebrew": "iso8859_8", "greek": "iso8859_7", "latin2": "iso8859_2",
    "latin5": "iso8859_9", "latin7": "iso8859_13", "tis620": "tis_620", "macce": "mac_latin2",
    "macroman": "mac_roman",
}


def _python_codec(charset: str) -> str | None:
    name = _CODEC.get(charset, charset)
    if name is None:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def charset_of_collation(collation: int) -> str | None:
    """The character set of a collation id, None when the table does not know it."""
    return _BY_ID.get(collation)


def codec_for_charset(name: str | None) -> str | None:
    """Python codec for a character set name; None for binary or a set Python
    cannot decode (values stay bytes)."""
    if not name:
        return None
    known = name.lower()
    if known not in _CODEC and known not in _COLLATIONS:
        return "utf-8"  # a set newer than this table: the new ones are Unicode
    return _python_codec(known)


def codec_for_collation(collation: int | None) -> str | None:
    """Python codec for a collation id; None for binary (values stay bytes)."""
    if collation is None or collation == BINARY_COLLATION:
        return None
    name = _BY_ID.get(collation)
    if name is None:
        return "utf-8"  # newer than the table: utf8mb4 on both servers
    return _python_codec(name)
