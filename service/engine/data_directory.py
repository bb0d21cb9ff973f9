"""A data directory's own protection: owner-only, and never committed with a project.

Why: the data directory holds the key-encryption keys beside the encrypted store. A
directory created inside a git work tree (``engram admin context init -d ./data`` in a
project) would otherwise show its keys, store and contexts to ``git add -A``; there it
gets a ``.gitignore`` that ignores everything in it, itself included.
"""

from __future__ import annotations

import os
from pathlib import Path

from engram.service.store.address import DB_FILE as DB_FILE  # named by the store room; re-exported

#: service.operator.ownership's lock file: a restore target may hold it.
LOCK_NAME = "engram.lock"
#: Derived model files (the ONNX export); never backed up.
MODELS_DIR = "models"
#: The MCP front end's audit log (one line per call: digests, never content).
AUDIT_FILE = "audit.jsonl"
GITIGNORE = ".gitignore"
#: Ignores every file of the data directory (keys, store, contexts, indexes, this file).
GITIGNORE_TEXT = "# engram data directory: keys, store and contexts never go into git\n*\n"


def inside_git_work_tree(path: Path) -> bool:
    """Whether ``path`` lies in a git work tree (a ``.git`` directory or file above it)."""
    return any((parent / ".git").exists() for parent in (path, *path.parents))


def claim_data_dir(data_dir: Path) -> Path:
    """Create ``data_dir`` (mode 0700, also when it existed with the caller's umask) and,
    inside a git work tree, its ignore-everything ``.gitignore`` (an existing one is kept)."""
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(data_dir, 0o700)
    ignore = data_dir / GITIGNORE
    if inside_git_work_tree(data_dir) and not ignore.exists():
        fd = os.open(ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(GITIGNORE_TEXT)
    return data_dir
