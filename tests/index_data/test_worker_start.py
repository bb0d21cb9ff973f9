"""Whether a load is written in worker processes (and how many), and the workers' start
ahead of the loading process's own: the fork server imports the worker's modules while
the command opens its engine, and the command's load is written through that worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram.index_data.worker_start import WORKER_FROM, WORKER_MODULE, uses_worker
from engram.models.device import usable_cores


def test_what_is_said_is_done_and_unsaid_follows_the_size_and_the_cores() -> None:
    assert uses_worker(10, True) and not uses_worker(10**6, False)
    assert not uses_worker(WORKER_FROM - 1)
    assert uses_worker(WORKER_FROM) == uses_worker(None) == (usable_cores() >= 2)


@pytest.mark.parametrize(("cores", "writers"), [(1, 1), (2, 1), (3, 2), (16, 2)])
def test_two_workers_write_from_three_cores_up(monkeypatch: pytest.MonkeyPatch, cores: int, writers: int) -> None:
    import engram.index_data.worker_start as worker_start

    monkeypatch.setattr(worker_start, "usable_cores", lambda: cores)
    assert worker_start.writer_count() == writers


def test_the_writing_module_names_itself() -> None:
    import engram.index_data.writer as writer

    assert writer.__name__ == WORKER_MODULE


def _python(code: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(
    "forkserver" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork server here"
)
def test_a_worker_started_after_prepare_worker_has_its_modules_already() -> None:
    """A fresh interpreter (the fork server is one per process): a worker forked once
    ``prepare_worker`` ran finds the writing module imported before it runs anything; a
    worker of a server started without it does not."""
    probe = (
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from engram.index_data.worker_start import prepare_worker, worker_context\n"
        "{prepare}\n"
        "with ProcessPoolExecutor(1, mp_context=worker_context()) as pool:\n"
        f"    print(pool.submit(eval, \"{WORKER_MODULE!r} in __import__('sys').modules\").result())\n"
    )
    assert _python(probe.format(prepare="prepare_worker()")) == "True"
    assert _python(probe.format(prepare="pass")) == "False"


def test_the_ingest_command_writes_through_its_worker(tmp_path: Path) -> None:
    """``engram ingest --worker`` as an operator runs it: every clean record written by
    the worker process, the one holding a secret refused by its scan."""
    corpus = tmp_path / "records.jsonl"
    lines = [{"id": f"d{n}", "text": f"Ferry timetable note {n} for the harbour."} for n in range(40)]
    lines[7]["text"] = "deploy key AKIAIOSFODNN7EXAMPLE for the bucket"
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-m", "engram.service.cli", "ingest", str(corpus), "-d", str(tmp_path / "data")]
        + ["--no-model", "--no-progress", "--worker", "--batch-size", "16"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["ingested"] == 39 and summary["refused"] == {"secret": 1}
    assert summary["worker_cpu_seconds"] > 0  # written in the worker, not inline
