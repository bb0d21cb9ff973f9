"""A small filesystem of its own on a server's index directory, for disk-full tests.

Why a real filesystem: a full disk fails writes wherever they happen (a Tantivy
segment, a vector file, a checkpoint's rename), in ways no injected exception covers.
The server runs in a mount namespace of its own (``unshare --mount``; plus a user
namespace, ``--user --map-root-user``, when the tests do not run as root) in which a
tmpfs of ``size_bytes`` is mounted on its index directory before the server starts; the
test reaches that filesystem through ``/proc/PID/root``. Nothing stays mounted when the
server ends, however it ends.

:func:`unavailable` says why this machine cannot (no ``unshare``, user namespaces
disabled, a kernel that refuses the mount), so a test skips with that reason.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_MOUNT = 'mount -t tmpfs -o "size=$1,mode=0700" tmpfs "$2" && shift 2 && exec "$@"'


def _unshare() -> list[str] | None:
    tool = shutil.which("unshare")
    if tool is None:
        return None
    flags = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        flags = ["--user", "--map-root-user", *flags]
    return [tool, *flags]


def unavailable() -> str | None:
    """None when a server can be given a small filesystem here, else why not."""
    prefix = _unshare()
    if prefix is None:
        return "no unshare(1) on this machine"
    with tempfile.TemporaryDirectory() as probe:
        done = subprocess.run(
            [*prefix, "sh", "-c", _MOUNT, "sh", "1m", probe, "true"], capture_output=True, text=True, timeout=30
        )
    if done.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace here ({' '.join(prefix)}): {done.stderr.strip()[:200]}"
    return None


def on_small_disk(command: list[str], mount_point: Path, size_bytes: int) -> list[str]:
    """``command`` run with a tmpfs of ``size_bytes`` mounted on ``mount_point`` (which
    must exist), in a mount namespace of its own."""
    prefix = _unshare()
    assert prefix is not None
    return [*prefix, "sh", "-c", _MOUNT, "sh", str(size_bytes), str(mount_point), *command]


class Filler:
    """Takes the free space of the filesystem at ``directory`` and gives it back."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "filler.bin"

    def fill(self) -> int:
        """Write until the filesystem is full; the bytes taken."""
        taken = 0
        chunk = b"\0" * 65536
        with open(self.path, "ab", buffering=0) as handle:
            for size in (65536, 4096, 512, 1):
                while True:
                    try:
                        taken += handle.write(chunk[:size])
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        return taken

    def free(self) -> None:
        self.path.unlink(missing_ok=True)
