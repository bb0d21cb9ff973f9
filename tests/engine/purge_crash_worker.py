"""Purge-crash worker: admits records, forgets one in a scope too large to purge inline,
then runs the background purge and kills itself with SIGKILL at one point of it.

Run as `python purge_crash_worker.py DATA_DIR POINT`. Prints one JSON line once the
forget was acknowledged (its arguments and answer, the records kept, whether the
forgotten words were on disk then), then dies at POINT; "survived" means POINT was
never reached.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script: its own folder is on sys.path; the ranking tests' encoder is beside it.
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "ranking"))

from engine_support import accept, context, files_containing, forget, forget_args, open_engine  # noqa: E402

from engram.ranking.lexical import INDEX_DIR, LexicalIndex  # noqa: E402
from engram.ranking.semantic import SemanticIndex  # noqa: E402
from engram.service.engine import PurgeSchedule  # noqa: E402

SECRET = "qzvorthameliquux"
PURGE_CTX = context(tenant="crash", workspace="purge")
KEPT = ("harbour crane manifest", "harbour pilot ladder", "harbour tide gauge")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def before(target: Any, name: str) -> None:
    """Die when ``target.name`` is called, before it runs."""
    setattr(target, name, lambda *args, **kwargs: die())


def after(target: Any, name: str) -> None:
    """Die once ``target.name`` has returned."""
    original: Callable[..., Any] = getattr(target, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        die()

    setattr(target, name, dying)


def between_renames() -> None:
    """Die after the first rename of a lexical swap: the scope has no current index."""
    rename = os.rename

    def dying(src: Any, dst: Any) -> None:
        rename(src, dst)
        if Path(src).name == INDEX_DIR:
            die()

    os.rename = dying  # type: ignore[assignment]


def main() -> None:
    data_dir, point = Path(sys.argv[1]), sys.argv[2]
    engine = open_engine(data_dir, purge=PurgeSchedule(inline_records=0, delay_s=0))
    keep = [accept(engine, PURGE_CTX, f"the {text} notes for the night shift") for text in KEPT]
    gone = accept(engine, PURGE_CTX, f"the {SECRET} ledger of the harbour night shift")
    # A first forget and its purge leave one segment of every live document: the second
    # forget's delete then only marks its document there, and the bytes stay until a purge
    # (a segment whose documents are all deleted would be dropped by the delete's commit).
    forget(engine, PURGE_CTX, accept(engine, PURGE_CTX, "a draft to forget first"))
    engine.operator.sweep_invalidations()
    engine.deps.sweeper.schedule = lambda sweep: None  # type: ignore[method-assign] - purged below
    args = forget_args(gone)
    result = forget(engine, PURGE_CTX, gone, args)
    on_disk = bool(files_containing(data_dir, SECRET.encode()))
    sys.stdout.write(json.dumps({"args": args, "result": result, "keep": keep, "gone": gone, "on_disk": on_disk}))
    sys.stdout.write("\n")
    sys.stdout.flush()
    if point == "lexical-copied":
        before(LexicalIndex, "_swap")
    elif point == "lexical-renamed":
        between_renames()
    elif point == "semantic-begun":
        before(SemanticIndex, "purge")
    elif point == "semantic-built":
        after(SemanticIndex, "_fresh")
    elif point == "semantic-written":  # the new generation's files, its meta.json not in place
        after(SemanticIndex, "_write_generation")
    elif point == "semantic-swapped":  # its meta.json in place, the old generation's files not deleted
        before(SemanticIndex, "_remove_stale")
    elif point == "semantic-saved":
        before(engine.deps.store, "clear_pending_purges")
    engine.operator.sweep_invalidations()
    print("survived", flush=True)


if __name__ == "__main__":
    main()
