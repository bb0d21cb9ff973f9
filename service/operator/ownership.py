"""One owner of a data directory: an exclusive advisory lock, released by the kernel
when its holder exits (kill -9 included), so a crash never leaves the directory stuck."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys
from pathlib import Path
from types import TracebackType

from engram.models.errors import EngramError


class DirectoryHeld(EngramError):
    """Another process (a server, or another admin command) owns the data directory."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(f"another engram process holds {data_dir}")
        self.data_dir = data_dir


LOCK_FILE = "engram.lock"


class DataDirLock:
    """`with DataDirLock(d):` owns `d` or raises DirectoryHeld at once (no waiting)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._fd: int | None = None

    def acquire(self) -> DataDirLock:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryHeld(self.data_dir) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def is_held(data_dir: Path) -> bool:
    """Whether some process owns `data_dir` now (probing never blocks or creates it)."""
    path = Path(data_dir) / LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


#: macOS's getsockopt level and option for a Unix socket peer's credentials (a
#: `struct xucred`: version, uid, ...); Linux has SO_PEERCRED (pid, uid, gid).
_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED_SIZE = 0, 0x001, 76


def peer_is_owner(conn: socket.socket) -> bool:
    """Whether the peer of a Unix socket in the data directory runs as this process's
    user (or root): the check every socket of the directory makes before reading."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
    elif sys.platform == "darwin":
        _version, uid = struct.unpack_from("Ii", conn.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED_SIZE))
    else:
        return False
    return uid in (os.getuid(), 0)
