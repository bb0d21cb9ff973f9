"""A throwaway pg_auto_failover formation on loopback: a monitor, a primary and a
synchronous standby, from the machine's Debian binaries (`pg_autoctl`, `pg_config
--bindir`), in a temporary directory.

Why: engram runs on an existing failover manager rather than one of its own, and the
failover tests and the failover benchmark need the real one. The recipe is the one
docs/failover.md gives an operator, with the monitor settings that bring a failover
to seconds. As root every `pg_autoctl` runs as the `postgres` user (initdb refuses
root), in a clean environment whose HOME and XDG directories are the formation's own.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

#: The monitor's settings that take a failover from about 51 s (the defaults) to seconds.
FAST_MONITOR = {
    "health_check_period": 1000,
    "health_check_timeout": 1000,
    "health_check_max_retries": 1,
    "health_check_retry_delay": 500,
    "node_considered_unhealthy_timeout": 3000,
    "primary_demote_timeout": 5000,
}
DATABASE = "engram"
_NODE_SETTINGS = "shared_buffers = 128MB\nfsync = off\nfull_page_writes = off\nmax_connections = 200\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
    return Path(out) if out and (Path(out) / "initdb").exists() else None


class Node:
    """One PostgreSQL instance of the formation and its `pg_autoctl run` keeper."""

    def __init__(self, formation: Formation, name: str) -> None:
        self.formation, self.name = formation, name
        self.pgdata = formation.root / name
        self.port = _free_port()
        self.keeper: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def run(self) -> None:
        """Start its keeper (which starts and watches its postgres)."""
        log = open(self.formation.root / f"{self.name}.log", "ab")  # noqa: SIM115 - held by the child
        self.keeper = subprocess.Popen(
            self.formation.command("run", "--pgdata", str(self.pgdata)),
            stdout=log,
            stderr=log,
            env=self.formation.env,
            user=self.formation.user,
            start_new_session=True,
        )
        log.close()

    def kill_postgres(self) -> None:
        """SIGKILL the node's postmaster and its backends, as a crash would."""
        pid = self.postmaster_pid()
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """Stop the keeper, then postgres (immediately): the node is down until `run`."""
        self.kill()
        self.wait_down()

    def kill(self) -> None:
        """SIGKILL the keeper, then postgres; returns before postgres is gone."""
        if self.keeper is not None and self.keeper.poll() is None:
            os.killpg(self.keeper.pid, signal.SIGKILL)
            self.keeper.wait(timeout=10)
        self.keeper = None
        self.kill_postgres()

    def wait_down(self, timeout_s: float = 10) -> None:
        """Until the node's postmaster is gone (reaped, seconds after its keeper died)."""
        deadline = time.monotonic() + timeout_s
        while self.postmaster_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def postmaster_alive(self) -> bool:
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class Formation:
    """Monitor, primary and standby; `start()` returns when the standby is in sync."""

    @staticmethod
    def available() -> str | None:
        """None when a formation can start here, else why not."""
        if shutil.which("pg_autoctl") is None:
            return "pg_autoctl is not installed (Debian: postgresql-15-auto-failover)"
        if _bindir() is None:
            return "PostgreSQL server binaries are not installed (pg_config --bindir)"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root without a 'postgres' user to run the servers as"
        return None

    def __init__(self, root: Path | None = None) -> None:
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found (pg_config --bindir)")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="engram-formation-", dir=root))
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.role = self.user or pwd.getpwuid(os.geteuid()).pw_name
        self.env = {
            "PATH": f"{bindir}:/usr/bin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            "LANG": "C.UTF-8",
            "PGHOST": str(self.root),  # its socket directory: pg_autoctl talks to each local postgres there
        }
        self.monitor = Node(self, "monitor")
        self.nodes = [Node(self, "node1"), Node(self, "node2")]

    # ------------------------------------------------------------------ commands
    def command(self, *args: str) -> list[str]:
        return [shutil.which("pg_autoctl") or "pg_autoctl", *args]

    def _run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            env=self.env,
            user=self.user,
            cwd=self.root,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if " ERROR " in line or " FATAL " in line]
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: " + "\n".join(errors[:8]))
        return done.stdout

    def autoctl(self, *args: str, timeout: float = 120) -> str:
        return self._run(*self.command(*args), timeout=timeout)

    def _initdb(self, node: Node) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(node.pgdata), "-A", "trust", "-U", self.role, "--no-sync",
            "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        self._settle_conf(node)

    def _settle_conf(self, node: Node) -> None:
        """The socket directory and modest memory, after whatever pg_autoctl included
        (it computes shared_buffers as a quarter of the machine's memory otherwise)."""
        with open(node.pgdata / "postgresql.conf", "a") as conf:
            conf.write(f"unix_socket_directories = '{self.root}'\n{_NODE_SETTINGS}")

    # ------------------------------------------------------------------ lifecycle
    def start(self, *, fast_monitor: bool = True) -> Formation:
        """Monitor, then primary, then standby; on any failure everything started is
        stopped and the directory removed before the error propagates."""
        try:
            self._start(fast_monitor)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, fast_monitor: bool) -> None:
        self._initdb(self.monitor)
        self.autoctl(
            "create", "monitor", "--pgdata", str(self.monitor.pgdata), "--pgport", str(self.monitor.port),
            "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
        )  # fmt: skip
        self._settle_conf(self.monitor)
        self.monitor.run()
        self._wait(lambda: self._monitor_ready(), "the monitor to accept connections")
        if fast_monitor:
            self.tune_monitor(FAST_MONITOR)
        for i, node in enumerate(self.nodes):
            if i == 0:  # a standby is a base backup of the primary (its settings included)
                self._initdb(node)
            else:  # otherwise the standby's base backup waits for a checkpoint
                with psycopg.connect(self.node_url(self.nodes[0]), autocommit=True) as conn:
                    conn.execute("CHECKPOINT")
            self.autoctl(
                "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", node.name,
                "--monitor", self.monitor_url(), "--auth", "trust", "--no-ssl", "--dbname", DATABASE,
                "--username", self.role, timeout=180,
            )  # fmt: skip
            self._settle_conf(node)
            node.run()
            want = {"single"} if i == 0 else {"primary", "secondary"}
            self._wait(functools.partial(self._joined, node, want), f"{node.name} to join")

    def stop(self) -> None:
        nodes = [*self.nodes, self.monitor]
        for node in nodes:  # all killed first: their postmasters are reaped meanwhile, not in turn
            node.kill()
        for node in nodes:
            node.wait_down()
        shutil.rmtree(self.root, ignore_errors=True)

    def tune_monitor(self, settings: dict[str, int]) -> None:
        """`ALTER SYSTEM SET pgautofailover.<name>` on the monitor, one per statement, then reload."""
        with psycopg.connect(self._monitor_local(), autocommit=True) as conn:
            for name, value in settings.items():
                conn.execute(f"ALTER SYSTEM SET pgautofailover.{name} = {int(value)}")
            conn.execute("SELECT pg_reload_conf()")

    # ------------------------------------------------------------------ addresses
    def monitor_url(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def _monitor_local(self) -> str:
        return f"postgresql://{self.role}@/pg_auto_failover?host={self.root}&port={self.monitor.port}"

    def node_url(self, node: Node, database: str = DATABASE) -> str:
        return f"postgresql://{self.role}@127.0.0.1:{node.port}/{database}"

    def url(self) -> str:
        """The multi-host URL engram connects with: whichever node is primary."""
        hosts = ",".join(n.address for n in self.nodes)
        return f"postgresql://{self.role}@{hosts}/{DATABASE}?target_session_attrs=read-write"

    # ------------------------------------------------------------------ state
    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported state, goal state), as the monitor sees them."""
        with psycopg.connect(self._monitor_local(), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute("SELECT nodename, reportedstate, goalstate FROM pgautofailover.node").fetchall()
        return {str(name): (str(reported), str(goal)) for name, reported, goal in rows}

    def primary(self) -> Node | None:
        """The node the monitor reports as primary (reported and goal state agree)."""
        try:
            states = self.states()
        except psycopg.Error:
            return None
        for node in self.nodes:
            if states.get(node.name) in {("primary", "primary"), ("wait_primary", "wait_primary")}:
                return node
        return None

    def accepts(self, node: Node) -> bool:
        """Whether the node's postgres accepts a connection now."""
        try:
            with psycopg.connect(self.node_url(node, "postgres"), connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def _joined(self, node: Node, want: set[str]) -> bool:
        return self._settled(want) and self.accepts(node)

    def _monitor_ready(self) -> bool:
        try:
            self.states()
        except psycopg.Error:
            return False
        return True

    def _settled(self, want: set[str]) -> bool:
        try:
            states = self.states()
        except psycopg.Error:
            return False
        reported = {r for r, g in states.values() if r == g}
        return len(reported) == len(states) and {r for r, _ in states.values()} == want

    def wait_settled(self, timeout_s: float = 120) -> None:
        """Until one node is primary and the other its synchronous secondary."""
        self._wait(lambda: self._settled({"primary", "secondary"}), "the formation to settle", timeout_s)

    def _wait(self, ready: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}: {self.states() if self._monitor_ready() else 'no monitor'}")

    def switchover(self) -> None:
        self.autoctl("perform", "switchover", "--pgdata", str(self.monitor.pgdata), "--formation", "default")
