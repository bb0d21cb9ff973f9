"""A throwaway PostgreSQL cluster for the tests: the machine's own server binaries
(`pg_config --bindir`), a temporary data directory, a unix socket and a free port.

As root the server runs as the `postgres` user (initdb refuses root), which gets the
temporary directory. `PostgresCluster.available()` says why not when the binaries are
missing, so callers can skip with that reason.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

_names = itertools.count()


def _bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(out)
    return path if (path / "initdb").exists() and (path / "pg_ctl").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found (pg_config --bindir)")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="engram-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.role = self._user or pwd.getpwuid(os.geteuid()).pw_name

    @staticmethod
    def available() -> str | None:
        """None when a cluster can be started here, else the reason it cannot."""
        if _bindir() is None:
            return "PostgreSQL server binaries are not installed (pg_config --bindir has no initdb/pg_ctl)"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root without a 'postgres' user to run the server as"
        return None

    def _run(self, *args: str) -> None:
        subprocess.run(list(args), check=True, capture_output=True, user=self._user, cwd=self.root)

    def start(self) -> PostgresCluster:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            self.role,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        self.start_server()
        return self

    def start_server(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses='' -c fsync=off"
            " -c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.root / "server.log"),
            "start",
        )

    def server_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill_server(self) -> None:
        """kill -9 the postmaster and every backend (its process group), as a crash
        would, and wait until they are gone."""
        import signal
        import time

        pid = self.server_pid()
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.role}@/{database}?host={self.root}&port={self.port}"

    def create_database(self, prefix: str = "engram") -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
