"""The sandbox against real mariadbd servers: replication, thread control,
restarts, the lagctl CLI cycle, and that no server outlives its owner."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest
from click.testing import CliRunner

from lagd.cli.main import main as lagctl
from lagd.errors import LagdError
from lagd.prefetch import stall
from lagd.sandbox import pair as sandbox_module
from lagd.sandbox import server as sandbox_server
from lagd.sandbox.pair import Sandbox, SandboxConfig, SandboxError


def wait_for(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def is_our_mariadbd(pid: int, needle: str) -> bool:
    """Whether pid is a live (non-zombie) mariadbd whose command line mentions needle."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z" and needle.encode() in cmdline


def mariadbd_pids_under(base: Path) -> list[int]:
    needle = f"--datadir={base}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return [p for p in pids if is_our_mariadbd(p, str(base))]


def relay_log_numbers(sb: Sandbox) -> list[int]:
    return [int(name.rsplit(".", 1)[1]) for name in sb.relay_log_index().read_text().split()]


def lagctl_run(*args: str) -> subprocess.CompletedProcess[str]:
    """lagctl in a child process, so that `up` really exits before `status`."""
    code = "import sys; from lagd.cli.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


# -- replication ---------------------------------------------------------------


def test_row_written_on_source_shows_up_on_replica(sandbox: Sandbox, schema: str) -> None:
    sandbox.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    sandbox.source.query(f"INSERT INTO `{schema}`.t VALUES (1, 'hello')")
    sandbox.wait_caught_up(timeout=30)

    # Read it the way lagd will: TCP on loopback as the lagd user.
    conn = pymysql.connect(**sandbox.replica().dsn.as_kwargs(), database=schema)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT v FROM t WHERE id = 1")
            assert cur.fetchall() == (("hello",),)
    finally:
        conn.close()
    assert sandbox.replica().query("SELECT @@read_only AS ro")[0]["ro"] == 1


def test_lagd_user_has_exactly_the_grants_it_needs(sandbox: Sandbox) -> None:
    replica, source = sandbox.replica(), sandbox.source
    grants = replica.query("SHOW GRANTS FOR 'lagd'@'127.0.0.1'")
    text = " ".join(next(iter(g.values())) for g in grants)
    assert "GRANT SELECT, PROCESS, BINLOG MONITOR, SLAVE MONITOR ON *.*" in text
    # PROCESS: the SQL thread's OS thread id, for where its time goes (lagd.prefetch.stall).
    conn = pymysql.connect(**replica.dsn.as_kwargs(), cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cur:
            cur.execute(stall.appliers_sql(mariadb=True))
            assert stall.applier_tids(cur.fetchall()), "the lagd user sees the SQL thread's TID"
    finally:
        conn.close()

    for server, allowed in (
        (replica, ["SHOW SLAVE STATUS", "SHOW ALL SLAVES STATUS", "SELECT @@gtid_slave_pos"]),
        (source, ["SHOW MASTER STATUS", "SHOW BINARY LOGS", "SELECT @@gtid_binlog_pos"]),
    ):
        # Not CREATE DATABASE on the replica: there read_only is checked
        # before privileges and would answer instead.
        denied = ["SET GLOBAL max_connections = 100", "STOP SLAVE"]
        if server is source:
            denied.append("CREATE DATABASE lagd_must_not_write")
        conn = pymysql.connect(**server.dsn.as_kwargs())
        try:
            with conn.cursor() as cur:
                for stmt in allowed:
                    cur.execute(stmt)
                    cur.fetchall()
                for stmt in denied:
                    with pytest.raises(pymysql.err.OperationalError, match="denied"):
                        cur.execute(stmt)
        finally:
            conn.close()


def test_stopped_sql_thread_stops_applying_while_io_thread_keeps_receiving(
    sql_thread_stopped: Sandbox, schema: str
) -> None:
    sb = sql_thread_stopped
    before = sb.slave_status()
    assert before["Slave_SQL_Running"] == "No"
    assert before["Slave_IO_Running"] == "Yes"

    sb.source.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    for i in range(20):
        sb.source.query(f"INSERT INTO `{schema}`.t VALUES (%s)", (i,))
    want = int(sb.source.query("SHOW MASTER STATUS")[0]["Position"])

    wait_for(
        lambda: int(sb.slave_status()["Read_Master_Log_Pos"]) >= want,
        what="the IO thread to receive the new events",
    )
    after = sb.slave_status()
    assert int(after["Read_Master_Log_Pos"]) > int(before["Read_Master_Log_Pos"])
    assert after["Exec_Master_Log_Pos"] == before["Exec_Master_Log_Pos"]
    assert not sb.replica().query(
        "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
    )
    # The events sit in the relay log, where lagd's reader will find them.
    index = sb.relay_log_index()
    names = index.read_text().split()
    assert names
    assert (sb.relay_log_dir() / Path(names[-1]).name).stat().st_size > 0


def test_relay_log_paths_and_flush(sandbox: Sandbox) -> None:
    index = sandbox.relay_log_index()
    assert index.parent == sandbox.relay_log_dir()
    assert index.parent == sandbox.replica().datadir
    before = index.read_text().split()
    sandbox.flush_relay_logs()
    after = index.read_text().split()
    assert len(after) > len(before) or after[-1] != before[-1]


# -- restarts ------------------------------------------------------------------


def test_replica_survives_kill_and_restart(sandbox: Sandbox, schema: str) -> None:
    src, replica = sandbox.source, sandbox.replica()
    src.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    src.query(f"INSERT INTO `{schema}`.t VALUES (1)")
    sandbox.wait_caught_up()
    old_pid = replica.pid
    assert old_pid is not None

    sandbox.kill_server(replica.name)
    assert not replica.is_alive()
    assert not is_our_mariadbd(old_pid, str(replica.datadir))
    src.query(f"INSERT INTO `{schema}`.t VALUES (2), (3)")  # written while it is down

    sandbox.restart_server(replica.name)
    assert replica.pid != old_pid
    sandbox.wait_caught_up(timeout=30)
    assert replica.query(f"SELECT COUNT(*) AS n FROM `{schema}`.t")[0]["n"] == 3
    st = sandbox.slave_status()
    assert (st["Slave_IO_Running"], st["Slave_SQL_Running"]) == ("Yes", "Yes")


def test_gtid_restart_discards_relay_logs_and_refetches(sandbox: Sandbox, schema: str) -> None:
    """MariaDB behaviour lagd's relay-log reader must live with.

    With MASTER_USE_GTID=slave_pos, starting replication from a fully stopped
    state (here: after a restart) deletes the existing relay logs, refetches
    everything after @@gtid_slave_pos, and numbers relay logs from .000001
    again: the same file names come back with other contents.
    """
    src = sandbox.source
    src.query(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    sandbox.wait_caught_up()
    sandbox.stop_sql_thread()
    try:
        for i in range(10):
            src.query(f"INSERT INTO `{schema}`.t VALUES (%s)", (i,))
        want = int(src.query("SHOW MASTER STATUS")[0]["Position"])
        wait_for(lambda: int(sandbox.slave_status()["Read_Master_Log_Pos"]) >= want)
        before = relay_log_numbers(sandbox)

        # The restarted server opens relay log max(before)+1 at startup; the
        # IO thread's start then throws the whole set away.
        sandbox.restart_server(sandbox.replica().name)  # starts the IO thread only
        assert sandbox.slave_status()["Slave_SQL_Running"] == "No"
        wait_for(lambda: int(sandbox.slave_status()["Read_Master_Log_Pos"]) >= want)
        after = relay_log_numbers(sandbox)
        assert after[0] == 1
        assert max(after) <= max(before)
    finally:
        sandbox.start_sql_thread()
    sandbox.wait_caught_up()
    rows = sandbox.replica().query(f"SELECT COUNT(*) AS n FROM `{schema}`.t")
    assert rows[0]["n"] == 10


# -- other topologies, failures, leaks --------------------------------------------


def test_file_position_replication(tmp_path: Path) -> None:
    cfg = SandboxConfig(gtid=False, base_dir=tmp_path, source_buffer_pool_mb=16, replica_buffer_pool_mb=16)
    with Sandbox(cfg) as sb:
        assert sb.slave_status()["Using_Gtid"] == "No"
        sb.source.query("CREATE DATABASE fp")
        sb.source.query("CREATE TABLE fp.t (id INT PRIMARY KEY)")
        sb.source.query("INSERT INTO fp.t VALUES (7)")
        sb.wait_caught_up(timeout=30)
        assert sb.replica().query("SELECT id FROM fp.t") == [{"id": 7}]
        base = sb.base_dir
        pids = [s.pid for s in sb.servers]
    assert base is not None
    assert not base.exists()
    assert not any(p is not None and is_our_mariadbd(p, str(base)) for p in pids)


def test_taken_port_is_retried_with_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = int(holder.getsockname()[1])
    handed_out = iter([taken])  # the source gets the taken port first
    real_free_port = sandbox_module.free_port
    monkeypatch.setattr(sandbox_module, "free_port", lambda: next(handed_out, 0) or real_free_port())
    cfg = SandboxConfig(base_dir=tmp_path, source_buffer_pool_mb=16, replica_buffer_pool_mb=16)
    try:
        with Sandbox(cfg) as sb:
            assert sb.source.port != taken
            assert "Address already in use" in sb.source.error_log.read_text()
            sb.source.query("CREATE DATABASE moved")
            sb.wait_caught_up(timeout=30)
    finally:
        holder.close()


def test_server_that_fails_to_start_reports_its_error_log(tmp_path: Path) -> None:
    cfg = SandboxConfig(base_dir=tmp_path, replica_extra_options={"no-such-option": "1"})
    sb = Sandbox(cfg)
    with pytest.raises(SandboxError, match="replica0: mariadbd exited") as info:
        sb.start()
    assert "no-such-option" in str(info.value)  # the error log's own words
    assert sb.base_dir is not None
    assert not mariadbd_pids_under(sb.base_dir)
    assert not sb.base_dir.exists()


def test_missing_mariadbd_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sandbox_server, "EXTRA_SEARCH_DIRS", ())
    with pytest.raises(SandboxError) as info:
        Sandbox(SandboxConfig(base_dir=tmp_path, cache_dir=tmp_path / "cache")).start()
    assert isinstance(info.value, LagdError)
    assert "MariaDB server is missing" in str(info.value)
    assert "apt-get install -y mariadb-server" in str(info.value)

    result = CliRunner().invoke(lagctl, ["sandbox", "up", "--state", str(tmp_path / "s.json")])
    assert result.exit_code == 2
    assert result.stderr.startswith("lagctl: error: MariaDB server is missing")
    assert "Traceback" not in result.output


def test_servers_die_with_their_parent_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from pathlib import Path
        from lagd.sandbox.pair import Sandbox, SandboxConfig
        sb = Sandbox(SandboxConfig(base_dir=Path({str(tmp_path)!r}))).start()
        print(json.dumps([s.pid for s in sb.servers]), flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        pids = json.loads(child.stdout.readline())
        assert all(is_our_mariadbd(p, str(tmp_path)) for p in pids)
    finally:
        child.send_signal(signal.SIGKILL)  # no atexit, no finally: only PDEATHSIG helps
        child.wait()
    wait_for(lambda: not mariadbd_pids_under(tmp_path), what="orphaned servers to die")


def test_lagctl_sandbox_up_status_down(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    up = lagctl_run("sandbox", "up", "--state", str(state), "--dir", str(tmp_path))
    assert up.returncode == 0, up.stderr
    data = json.loads(state.read_text())
    base = Path(data["base_dir"])
    pids = [s["pid"] for s in data["servers"]]
    try:
        # `up` has exited; its servers must still run.
        assert [s["role"] for s in data["servers"]] == ["source", "replica"]
        assert all(is_our_mariadbd(p, str(base)) for p in pids)

        again = lagctl_run("sandbox", "up", "--state", str(state))
        assert again.returncode == 1
        assert "already up" in again.stderr
        assert "lagctl sandbox down" in again.stderr

        status = lagctl_run("sandbox", "status", "--state", str(state))
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count("alive") == 2
        assert "io=Yes sql=Yes behind=0" in status.stdout
    finally:
        down = lagctl_run("sandbox", "down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    assert not base.exists()
    assert not [p for p in pids if is_our_mariadbd(p, str(base))]
    assert not mariadbd_pids_under(tmp_path)

    gone = lagctl_run("sandbox", "status", "--state", str(state))
    assert gone.returncode == 1
    assert "no sandbox is up" in gone.stdout


def test_state_file_reattach_controls_servers(tmp_path: Path) -> None:
    cfg = SandboxConfig(base_dir=tmp_path, detached=True, source_buffer_pool_mb=16, replica_buffer_pool_mb=16)
    started = Sandbox(cfg).start()
    try:
        started.write_state(tmp_path / "s.json")
        again = Sandbox.from_state_file(tmp_path / "s.json")
        assert [s.pid for s in again.servers] == [s.pid for s in started.servers]
        again.stop_sql_thread()
        assert started.slave_status()["Slave_SQL_Running"] == "No"
        again.start_sql_thread()
        again.wait_caught_up()
    finally:
        started.stop()
    assert not mariadbd_pids_under(tmp_path)
    assert started.base_dir is not None
    assert not started.base_dir.exists()
    assert tmp_path.is_dir()
