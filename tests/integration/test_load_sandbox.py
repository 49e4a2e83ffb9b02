"""`lagctl load` against the sandbox: throttled by a real lagd, resumable after kill -9, clear errors.

Exactly-once is checked by content: the table's count and sum of CRC32 over
its rows equal the file's, on the source and on the replica.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from lagd.sandbox.pair import Sandbox
from tests.integration.daemon_util import running_daemon

LAGCTL = str(Path(sys.executable).parent / "lagctl")
USER, PASSWORD = "lagctl_loader", "load-pw"
TABLE_SQL = "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(40), n INT, KEY (n))"


@pytest.fixture(scope="module")
def loader_account(sandbox: Sandbox) -> str:
    src = sandbox.source
    src.query(f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
    src.query(f"GRANT ALL ON *.* TO '{USER}'@'127.0.0.1'")
    return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{src.port}"


def _write(path: Path, rows: int) -> Path:
    with path.open("w") as f:
        for i in range(1, rows + 1):
            f.write(f"{i}\tname {i}\t{i * 7 % 1000}\n")
    return path


def _file_sum(path: Path) -> tuple[int, int]:
    lines = path.read_bytes().splitlines()
    return len(lines), sum(zlib.crc32(line) for line in lines)


def _table_sum(server: object, table: str) -> tuple[int, int]:
    rows = server.query(  # type: ignore[attr-defined]
        f"SELECT COUNT(*) AS c, COALESCE(SUM(CRC32(CONCAT_WS('\\t', id, name, n))), 0) AS s FROM {table}")
    return int(rows[0]["c"]), int(rows[0]["s"])


def _lagctl(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([LAGCTL, "load", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LAGCTL, "load", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ), check=False)


@pytest.fixture
def table(sandbox: Sandbox, schema: str) -> Iterator[str]:
    sandbox.source.query(TABLE_SQL, db=schema)
    yield f"{schema}.t"


def test_waits_while_the_sql_thread_is_stopped(sandbox: Sandbox, loader_account: str, table: str,
                                               tmp_path: Path) -> None:
    data = _write(tmp_path / "rows.tsv", 20_000)
    with running_daemon(sandbox, tmp_path) as d:
        d.wait_for(lambda s: s["lag"]["state"] == "idle" and s["lag"]["lag"] is not None)
        sandbox.stop_sql_thread()
        # lagd answers from its last poll: wait until it has seen the stop (within a poll interval).
        d.wait_for(lambda s: s["lag"]["state"] == "stopped")
        proc = _lagctl(str(data), "--table", table, "--source", loader_account, "--replica-lagd", d.url,
                       "--chunk-rows", "2000", "--max-lag", "5")
        # Its progress lines, as they come: lagctl must have asked lagd (and said
        # why it waits) before the SQL thread starts again, however slowly it starts.
        lines: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        try:
            # Held back before the first chunk: nothing reaches the source.
            deadline = time.monotonic() + 60
            while not any("waiting:" in line for line in lines):
                assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
                time.sleep(0.1)
            time.sleep(2)
            assert proc.poll() is None, "".join(lines)
            assert _table_sum(sandbox.source, table)[0] == 0
        finally:
            sandbox.start_sql_thread()
        proc.wait(timeout=120)
        reader.join(10)
        proc.communicate(timeout=10)  # stderr is at its end: this drains stdout and closes both
        err = "".join(lines)
        assert proc.returncode == 0, err
        assert "waiting:" in err and "SQL thread is not running" in err
    sandbox.wait_caught_up(timeout=60)
    assert _table_sum(sandbox.source, table) == _file_sum(data)
    assert _table_sum(sandbox.replica(), table) == _file_sum(data)


def test_kill_9_then_rerun_loads_each_row_once(sandbox: Sandbox, loader_account: str, table: str,
                                               tmp_path: Path) -> None:
    data = _write(tmp_path / "rows.tsv", 300_000)
    args = (str(data), "--table", table, "--source", loader_account, "--no-throttle", "--chunk-rows", "2000",
            "--progress-table", f"{table.split('.', maxsplit=1)[0]}.progress")
    proc = _lagctl(*args)
    progress = f"{table.split('.', maxsplit=1)[0]}.progress"
    deadline = time.monotonic() + 60
    chunks = 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            rows = sandbox.source.query(f"SELECT chunks FROM {progress}")
            chunks = int(rows[0]["chunks"]) if rows else 0
        except Exception:
            chunks = 0
        if chunks >= 5:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the load finished before it could be killed; make the file bigger"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)  # the server notices the dead connection and rolls its open chunk back
    committed = int(sandbox.source.query(f"SELECT records FROM {progress}")[0]["records"])
    count = _table_sum(sandbox.source, table)[0]
    assert 0 < count == committed < 300_000

    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    assert _table_sum(sandbox.source, table) == _file_sum(data)
    again = _run(*args)
    assert again.returncode == 0 and "already loaded" in again.stderr
    sandbox.wait_caught_up(timeout=60)
    assert _table_sum(sandbox.replica(), table) == _file_sum(data)


def test_ctrl_c_then_rerun(sandbox: Sandbox, loader_account: str, table: str, tmp_path: Path) -> None:
    data = _write(tmp_path / "rows.tsv", 300_000)
    progress = f"{table.split('.', maxsplit=1)[0]}.progress"
    args = (str(data), "--table", table, "--source", loader_account, "--no-throttle", "--chunk-rows", "2000",
            "--progress-table", progress)
    proc = _lagctl(*args)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            rows = sandbox.source.query(f"SELECT chunks FROM {progress}")
        except Exception:
            rows = []
        if rows and int(rows[0]["chunks"]) >= 5:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "rerun the same command to resume" in err and "Traceback" not in err
    time.sleep(0.5)
    committed = int(sandbox.source.query(f"SELECT records FROM {progress}")[0]["records"])
    assert _table_sum(sandbox.source, table)[0] == committed
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert _table_sum(sandbox.source, table) == _file_sum(data)


def test_header_csv_columns_and_set(sandbox: Sandbox, loader_account: str, table: str,
                                    tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text('id,label,num\r\n1,"a,b",5\r\n2,"multi\r\nline",6\r\n3,plain,7\r\n')
    res = _run(str(data), "--table", table, "--source", loader_account, "--no-throttle", "--format", "csv",
               "--lines-terminated-by", "\\r\\n", "--ignore-lines", "1", "--columns", "id,name,@num",
               "--set", "n = @num * 10", "--chunk-rows", "1")
    assert res.returncode == 0, res.stderr
    rows = sandbox.source.query(f"SELECT id, name, n FROM {table} ORDER BY id")
    assert [(r["id"], r["name"], r["n"]) for r in rows] == [
        (1, "a,b", 50), (2, "multi\r\nline", 60), (3, "plain", 70)]


TRICKY_CSV = (
    b'1,plain,1\n'
    b'2,ab"c,2\n'  # an enclosure character inside an unenclosed field is data
    b'3,"a"b\nc",3\n'  # a lone one inside an enclosed field too, and the line break with it
    b'4,"x""\ny",4\n'  # doubled: data; the field goes on past the line break
    b'5,"esc\\"\nz",5\n'  # escaped: data
    b'6,"",6\n'
    b'7,tab\\\nnext,7\n'  # an escaped line terminator in an unenclosed field
    b'8,"last",8'  # no terminator at the end
)


def test_chunk_cuts_match_the_servers_reading(sandbox: Sandbox, loader_account: str, table: str,
                                              tmp_path: Path) -> None:
    # Differential: one record per chunk must load exactly what one LOAD DATA of the whole file loads.
    data = tmp_path / "tricky.csv"
    data.write_bytes(TRICKY_CSV)
    schema = table.split(".", maxsplit=1)[0]
    sandbox.source.query("CREATE TABLE whole LIKE t", db=schema)
    conn = sandbox.source.connect(schema, local_infile=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE whole FIELDS TERMINATED BY ',' "
                        "OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'")
    finally:
        conn.close()
    res = _run(str(data), "--table", table, "--source", loader_account, "--no-throttle", "--format", "csv",
               "--chunk-rows", "1")
    assert res.returncode == 0, res.stderr
    want = sandbox.source.query("SELECT id, name, n FROM whole ORDER BY id", db=schema)
    got = sandbox.source.query(f"SELECT id, name, n FROM {table} ORDER BY id")
    assert len(want) == 8 and got == want
    assert "8 records" in res.stderr and "in 8 chunks" in res.stderr  # cut where the server cuts, no coarser


def _one_line_error(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_errors(sandbox: Sandbox, loader_account: str, table: str, tmp_path: Path) -> None:
    data = _write(tmp_path / "rows.tsv", 10)
    base = ("--source", loader_account, "--no-throttle")
    schema = table.split(".", maxsplit=1)[0]
    _one_line_error(_run(str(data), "--table", f"{schema}.nope", *base), "does not exist", "fix:")
    two = tmp_path / "two.tsv"
    two.write_text("1\tx\n")
    _one_line_error(_run(str(two), "--table", table, *base), "2 fields", "3 columns", "--columns")
    bad = loader_account.replace(PASSWORD, "wrong")
    _one_line_error(_run(str(data), "--table", table, "--source", bad, "--no-throttle"),
                    "Access denied", "password")
    _one_line_error(_run(str(data), "--table", table, "--source", loader_account), "--replica-lagd")
    sandbox.source.query("SET GLOBAL local_infile = 0")
    try:
        _one_line_error(_run(str(data), "--table", table, *base), "local_infile",
                        "SET GLOBAL local_infile = 1")
    finally:
        sandbox.source.query("SET GLOBAL local_infile = 1")
    assert _table_sum(sandbox.source, table)[0] == 0

    # Duplicate keys: LOCAL makes them warnings; the chunk is rolled back unless --ignore/--replace.
    assert _run(str(data), "--table", table, *base).returncode == 0
    more = tmp_path / "more.tsv"
    more.write_text("11\tnew\t1\n1\tdup\t1\n12\tnew\t2\n")
    _one_line_error(_run(str(more), "--table", table, *base), "Duplicate entry", "--allow-warnings")
    assert _table_sum(sandbox.source, table)[0] == 10
    assert _run(str(more), "--table", table, *base, "--ignore").returncode == 0
    assert _table_sum(sandbox.source, table)[0] == 12


def test_dry_run_prints_the_plan(sandbox: Sandbox, loader_account: str, table: str, tmp_path: Path) -> None:
    data = _write(tmp_path / "rows.tsv", 1000)
    res = _run(str(data), "--table", table, "--source", loader_account, "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "LOAD DATA LOCAL INFILE" in res.stdout and "chunk:" in res.stdout and "resume:" in res.stdout
    assert _table_sum(sandbox.source, table)[0] == 0
