"""How sessions are hardened, and how an endpoint names its server."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lagd.mysql.endpoint import Endpoint, hardening_sql, where_of

CASES = [
    ("mariadb", True, 2.0, {}, ["SET SESSION TRANSACTION READ ONLY", "SET SESSION lock_wait_timeout = 1",
                                "SET SESSION max_statement_time = 2.000"]),
    ("mariadb-fraction", True, 0.25, {}, ["SET SESSION TRANSACTION READ ONLY",
                                          "SET SESSION lock_wait_timeout = 1",
                                          "SET SESSION max_statement_time = 0.250"]),
    ("mysql", False, 2.0, {}, ["SET SESSION TRANSACTION READ ONLY", "SET SESSION lock_wait_timeout = 1",
                               "SET SESSION MAX_EXECUTION_TIME = 2000"]),
    ("mysql-tiny", False, 0.0001, {}, ["SET SESSION TRANSACTION READ ONLY",
                                       "SET SESSION lock_wait_timeout = 1",
                                       "SET SESSION MAX_EXECUTION_TIME = 1"]),
    ("writer", True, 5.0, {"read_only": False, "lock_wait_timeout_s": 2},
     ["SET SESSION lock_wait_timeout = 2", "SET SESSION max_statement_time = 5.000"]),
    ("lock-wait-never-0", False, 1.0, {"lock_wait_timeout_s": 0},
     ["SET SESSION TRANSACTION READ ONLY", "SET SESSION lock_wait_timeout = 1",
      "SET SESSION MAX_EXECUTION_TIME = 1000"]),
]


@pytest.mark.parametrize(("mariadb", "seconds", "kw", "want"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_hardening_sql(mariadb: bool, seconds: float, kw: dict[str, object], want: list[str]) -> None:
    assert hardening_sql(mariadb, seconds, **kw) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [0, -1])
def test_no_statement_timeout_is_refused(seconds: float) -> None:
    # 0 means "no limit" to the server: never send it by accident.
    with pytest.raises(ValueError, match="positive"):
        hardening_sql(True, seconds)


def test_where_and_repr_never_show_the_password() -> None:
    e = Endpoint("10.0.0.5", 3307, "lagd", "s3cret")
    assert e.where == "replica 10.0.0.5:3307"
    assert Endpoint(socket="/run/mysqld/mysqld.sock", role="source").where == "source /run/mysqld/mysqld.sock"
    assert "s3cret" not in repr(e) and "lagd@10.0.0.5:3307" in repr(e)


@dataclass
class ReplicaSection:
    host: str = "db"
    port: int = 3306
    user: str = "lagd"
    socket: str = ""
    connect_timeout: float = 3.0

    def password(self) -> str:
        return "pw"


def test_of_replica() -> None:
    assert Endpoint.of_replica(ReplicaSection()) == Endpoint("db", 3306, "lagd", "pw", "", 3.0)


class Conn:
    host, port, unix_socket = "h", 1, None


def test_where_of_a_connection() -> None:
    c = Conn()
    assert where_of(c) == "server h:1"
    c.lagd_where = "replica h:1"  # type: ignore[attr-defined]
    assert where_of(c) == "replica h:1"
