"""Contract: the pymysqlreplication internals lagd's reference decoder drives.

lagd pins mysql-replication exactly because it uses its internal packet API
(BinLogPacketWrapper over a PyMySQL MysqlPacket, plus a control connection
with ``charset`` and ``_get_dbms``). These tests fail first when an upgrade
changes that API, before the differential tests or the benchmark silently
stop meaning anything.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version
from pathlib import Path

from pymysql.protocol import MysqlPacket
from pymysqlreplication import row_event
from pymysqlreplication.packet import BinLogPacketWrapper
from reference_decoder import ReferenceDecoder, iter_raw_events, reference_rows

from lagd.relaylog import _wire as w

FIXTURES = Path(__file__).parent.parent / "fixtures" / "binlogs"


def test_pinned_version():
    assert version("mysql-replication") == "1.0.17"


def test_packet_wrapper_signature_is_the_one_we_call():
    params = list(inspect.signature(BinLogPacketWrapper.__init__).parameters)
    assert params[:16] == [
        "self", "from_packet", "table_map", "ctl_connection", "mysql_version", "use_checksum",
        "allowed_events", "only_tables", "ignored_tables", "only_schemas", "ignored_schemas",
        "freeze_schema", "ignore_decode_errors", "verify_checksum", "optional_meta_data",
        "enable_logging",
    ]


def test_wrapper_reads_a_raw_file_event_behind_an_ok_byte():
    buf = (FIXTURES / "mariadb-bin.000001").read_bytes()
    raw = [(t, ev, crc) for _o, t, ev, crc in iter_raw_events(buf)]
    tm = next(r for r in raw if r[0] == w.TABLE_MAP_EVENT)
    packet = MysqlPacket(b"\x00" + tm[1], "utf8")
    tables: dict = {}

    class Ctl:
        charset = "utf8mb4"

        def _get_dbms(self):
            return "mariadb"

    wrapper = BinLogPacketWrapper(packet, tables, Ctl(), (10, 5, 0), tm[2],
                                  frozenset({row_event.TableMapEvent}), None, None, None, None,
                                  False, False, False, False, False)
    assert isinstance(wrapper.event, row_event.TableMapEvent)
    assert (wrapper.event.schema, wrapper.event.table) == ("toddy_test", "outbox")
    assert wrapper.event_size == len(tm[1])
    assert list(tables) == [wrapper.event.table_id]


def test_rows_come_back_as_values_dicts():
    dec = ReferenceDecoder("mariadb")
    buf = (FIXTURES / "mariadb-bin.000001").read_bytes()
    rows = []
    for _o, typ, raw, crc in iter_raw_events(buf):
        if typ in (w.TABLE_MAP_EVENT, w.WRITE_ROWS_EVENT_V1):
            rows.extend(dec.rows(raw, crc))
    assert [r.after and next(iter(r.after.values())) for r in rows] == [62, 63]


def test_reference_rows_over_a_file():
    rows = list(reference_rows(FIXTURES / "mysql-enum-string-set.000001"))
    assert [r.kind for r in rows] == ["insert", "update", "delete"]
