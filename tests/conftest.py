"""Fixtures shared by the bulk-ingestion and evaluation tests: a small engine with the
deterministic test encoder, and a tiny BEIR collection; and by every test that loads the
real model, its runtime files made once per test run."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


from ranking_support import HashingTestEncoder  # noqa: E402

from engram.ranking.native import prepare_process  # noqa: E402
from engram.ranking.onnx_encoder import export_file, quantized_file  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """What the `engram` command sets before a sub-command, for the engines the tests
    build in this process: one BLAS thread, the C++ runtime loaded first."""
    prepare_process()


TOPICS = [
    "postgresql billing ledger serialisable transactions",
    "kubernetes ingress controller certificate rotation",
    "python packaging wheels manylinux build",
    "tantivy bm25 field boosts tokenizer stemming",
    "hnswlib vector index recall ef construction",
    "oauth token refresh expiry clock skew",
]


def write_beir(root: Path, n: int = 30, name: str = "tiny") -> Path:
    """A tiny BEIR collection: n docs over six topics, one query per topic."""
    d = root / name
    (d / "qrels").mkdir(parents=True)
    with open(d / "corpus.jsonl", "w") as f:
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            f.write(
                json.dumps(
                    {"_id": f"d{i}", "title": f"note {i} on {topic.split()[0]}", "text": f"{topic} detail number {i}"}
                )
                + "\n"
            )
    with open(d / "queries.jsonl", "w") as f:
        for t, topic in enumerate(TOPICS):
            f.write(json.dumps({"_id": f"q{t}", "text": topic}) + "\n")
        f.write(json.dumps({"_id": "unjudged", "text": "nothing"}) + "\n")
    with open(d / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(n):
            f.write(f"q{i % len(TOPICS)}\td{i}\t{1 + (i % 2)}\n")
        f.write("q0\td1\t-1\n")
    return d


@pytest.fixture
def encoder():
    return HashingTestEncoder()


@pytest.fixture
def engine(tmp_path: Path, encoder):
    from engram.service.engine import Engine

    eng = Engine.open(tmp_path / "data", encoder=encoder)
    yield eng
    eng.close()


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    return write_beir(tmp_path)


@pytest.fixture(scope="session")
def postgres_cluster():
    """One throwaway PostgreSQL server for the session (skipped, with the reason, only
    when the server binaries are absent)."""
    from postgres_support import PostgresCluster

    reason = PostgresCluster.available()
    if reason is not None:
        pytest.skip(reason)
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def database_url(postgres_cluster) -> str:
    """A fresh, empty PostgreSQL database for one test."""
    return postgres_cluster.create_database()


#: Makes the model's runtime files (the float32 export and its int8 copy) in the models
#: directory given, as the first process that loads the model would.
_PREPARE_MODEL = (
    "import sys\n"
    "from engram.ranking import QueryPrecision\n"
    "from engram.ranking.onnx_encoder import OnnxMiniLM\n"
    "for precision in QueryPrecision:\n"
    "    OnnxMiniLM(sys.argv[1], precision).load()\n"
)


@pytest.fixture(scope="session")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding the model's runtime files, made once per test run for
    every xdist worker (the first to ask makes them, in a process of its own, while the
    others wait on the lock): an export costs 10 s of CPU or more. Tests about making
    them use a directory of their own."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    models = root / "model-files"
    with (root / "model-files.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (export_file(models).exists() and quantized_file(models).exists()):
            models.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            subprocess.run([sys.executable, "-c", _PREPARE_MODEL, str(models)], env=env, check=True)
    return models
