"""`engram ingest` on a corpus that is not what it should be: a one-line error naming
the file, the line and what is wrong (exit 2, no traceback, nothing opened), and every
refused record named in the summary with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.service.cli import app

runner = CliRunner()
GOOD = '{"_id": "d1", "title": "Ferries", "text": "The winter timetable of the harbour ferries."}\n'


def _ingest(dataset: Path, data: Path, *extra: str):
    return runner.invoke(app, ["ingest", str(dataset), "-d", str(data), "--no-model", "--no-progress", *extra])


def _beir(root: Path, corpus: bytes) -> Path:
    root.mkdir()
    (root / "corpus.jsonl").write_bytes(corpus)
    return root


@pytest.mark.parametrize(
    ("name", "corpus", "line", "problem"),
    [
        ("truncated", (GOOD + '{"_id": "d2", "text": "cut sh').encode(), 2, "not JSON"),
        ("no-id", (GOOD + '{"title": "x", "text": "no id here"}\n').encode(), 2, 'no "_id"'),
        ("latin-1", GOOD.encode() + '{"_id": "d3", "text": "café"}\n'.encode("latin-1"), 2, "not UTF-8"),
        ("not-an-object", b'["d1", "text"]\n', 1, "a JSON list, not an object"),
    ],
)
def test_a_malformed_corpus_is_one_line_naming_file_and_line(tmp_path, name, corpus, line, problem) -> None:
    dataset = _beir(tmp_path / name, corpus)
    result = _ingest(dataset, tmp_path / "data")
    assert result.exit_code == 2, result.output
    assert f"{dataset / 'corpus.jsonl'}:{line}: {problem}" in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) <= 2


def test_a_queries_file_given_by_mistake_is_refused_before_anything_is_created(tmp_path) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "q1", "text": "when do the ferries run in winter?"}\n')
    result = _ingest(queries, tmp_path / "data")
    assert result.exit_code == 2
    assert f'{queries}:1: no "id"' in result.stderr and "corpus.jsonl" in result.stderr
    assert not (tmp_path / "data").exists()


def test_a_directory_without_a_corpus_is_named(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    result = _ingest(tmp_path / "empty", tmp_path / "data")
    assert result.exit_code == 2 and "without corpus.jsonl" in result.stderr


def test_each_refused_record_is_named_with_its_reason(tmp_path) -> None:
    records = tmp_path / "records.jsonl"
    lines = [
        {"id": "bad-payload", "payload": {"schema_version": 2}, "evidence": {}},
        {"id": "blank", "text": "   "},
        {"id": "leak", "text": "deploy key AKIAIOSFODNN7EXAMPLE for the bucket"},
        {"id": "fine", "text": "The harbour ferries run hourly in winter."},
    ]
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _ingest(records, tmp_path / "data")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ingested"] == 1
    named = {r["id"]: r for r in summary["refused_records"]}
    assert set(named) == {"bad-payload", "blank", "leak"}
    assert (
        named["bad-payload"]["reason"] == "invalid" and "payload.components: missing" in named["bad-payload"]["detail"]
    )
    assert named["blank"]["reason"] == "empty"
    assert named["leak"]["reason"] == "secret" and named["leak"]["detail"]  # the rule that matched
    assert "AKIAIOSFODNN7EXAMPLE" not in result.output
    assert "refused bad-payload: invalid" in result.stderr


def test_every_record_refused_exits_1(tmp_path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"id": "a", "text": ""}\n{"id": "b", "text": " "}\n')
    result = _ingest(records, tmp_path / "data")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["refused"] == {"empty": 2}
    assert "every one of the 2 records was refused" in result.stderr


def test_no_dataset_says_what_is_missing() -> None:
    result = runner.invoke(app, ["ingest"])
    assert result.exit_code == 2
    assert "Missing argument 'DATASET'" in result.output
    assert "COMMAND" not in result.output
