"""Small crash-safe file helpers shared by both channels.

Index side files (cursors, label maps) are replaced whole: write a temporary file in the
same directory, fsync it, then ``os.replace`` it over the old one, so a reader or a crash
sees either the old or the new content, never half of each.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temporary sibling of ``path``, then move it into place."""
    tmp = prepared_write(path, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def prepared_write(path: Path, write: Callable[[Path], object]) -> Path:
    """Let ``write`` fill a temporary sibling of ``path`` (``.<name>.*.tmp``), fsync'd;
    the caller moves it into place with ``os.replace`` when it chooses, or removes it.
    Filled outside a lock, it is swapped in under the lock in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def sync_directory(directory: Path) -> None:
    """Make the renames and new names inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: Path, value: Any) -> None:
    data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def read_json(path: Path) -> Any:
    """The JSON content of ``path``, or None when it does not exist."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
