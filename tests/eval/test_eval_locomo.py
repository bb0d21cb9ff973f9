"""LoCoMo conversations in BEIR layout enriched with LoCoMo's categories and session dates
(engram locomo-enrich), on a small synthetic conversation written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.eval.locomo import EnrichError, enrich, read_samples
from engram.eval.relevance import load_query_categories
from engram.index_data.readers import read_beir


def ms(iso: str) -> int:
    from datetime import UTC, datetime

    return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp() * 1000)


def sample(questions: list[str]) -> dict:
    """A LoCoMo-shaped conversation: two dated sessions, questions with categories."""
    return {
        "sample_id": "conv-7",
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Ben",
            "session_1_date_time": "9:05 am on 3 March, 2021",
            "session_1": [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "I planted tulips yesterday."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! Mine died."},
            ],
            "session_2_date_time": "6:40 pm on 12 April, 2021",
            "session_2": [{"speaker": "Ada", "dia_id": "D2:1", "text": "The tulips bloomed."}],
        },
        "qa": [
            {"question": questions[0], "answer": "2 March 2021", "evidence": ["D1:1"], "category": 2},
            {"question": questions[1], "answer": "no", "evidence": [], "category": 3},
            {"question": questions[2], "answer": "bloomed", "evidence": ["D2:1"], "category": 4},
        ],
    }


QUESTIONS = ["When did Ada plant tulips?", "Would Ben garden again?", "What did the tulips do?"]


def write_beir(folder: Path) -> Path:
    """The conversation as a BEIR copy has it (no dates, no categories); question 1 has
    no evidence, so it has no query."""
    folder.mkdir(parents=True)
    turns = [
        ("D1:1", "Ada: I planted tulips yesterday."),
        ("D1:2", "Ben: Lovely! Mine died."),
        ("D2:1", "Ada: The tulips bloomed."),
    ]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"conv-7:{t}", "title": "", "text": x}) + "\n" for t, x in turns)
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"conv-7:q{i}", "text": QUESTIONS[i]}) + "\n" for i in (0, 2))
    )
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nconv-7:q0\tconv-7:D1:1\t1\n")
    return folder


def test_turns_carry_their_session_date_and_questions_their_category(tmp_path: Path):
    beir = write_beir(tmp_path / "locomo" / "conv-7")
    (tmp_path / "locomo" / "LICENSE.txt").write_text("licence text")
    other = sample(["Something else entirely?", "x", "y"])
    source = tmp_path / "locomo10.json"
    source.write_text(json.dumps([other, sample(QUESTIONS)]))
    out = tmp_path / "enriched"

    assert enrich(read_samples([source]), tmp_path / "locomo", out) == ["conv-7"]

    times = {r.external_id: r.valid_time_ms for r in read_beir(out / "conv-7")}
    assert times == {
        "conv-7:D1:1": ms("2021-03-03T09:05:00"),
        "conv-7:D1:2": ms("2021-03-03T09:05:00"),
        "conv-7:D2:1": ms("2021-04-12T18:40:00"),
    }
    assert load_query_categories(out / "conv-7") == {"conv-7:q0": "temporal", "conv-7:q2": "single-hop"}
    assert [r.text for r in read_beir(out / "conv-7")] == [r.text for r in read_beir(beir)]
    assert (out / "conv-7" / "qrels" / "test.tsv").read_text() == (beir / "qrels" / "test.tsv").read_text()
    assert (out / "LICENSE.txt").read_text() == "licence text"


def test_one_flat_conversation_file_enriches_one_conversation_folder(tmp_path: Path):
    """The multimodal release's shape: the conversation's keys and qa side by side."""
    beir = write_beir(tmp_path / "conv-7")
    data = sample(QUESTIONS)
    flat = {**data["conversation"], "qa": data["qa"]}
    (tmp_path / "7.json").write_text(json.dumps(flat))
    enrich(read_samples([tmp_path / "7.json"]), beir, tmp_path / "out")
    assert load_query_categories(tmp_path / "out") == {"conv-7:q0": "temporal", "conv-7:q2": "single-hop"}


def test_a_conversation_no_sample_asks_is_refused(tmp_path: Path):
    beir = write_beir(tmp_path / "conv-7")
    samples = read_samples([_written(tmp_path / "s.json", [sample(["When did Ada plant roses?", "x", "y"])])])
    with pytest.raises(EnrichError, match="no LoCoMo sample"):
        enrich(samples, beir, tmp_path / "out")
    undated = sample(QUESTIONS)
    del undated["conversation"]["session_2_date_time"]
    with pytest.raises(EnrichError, match="conv-7:D2:1"):
        enrich(read_samples([_written(tmp_path / "u.json", undated)]), beir, tmp_path / "out2")


def test_the_command_writes_outside_the_repository_only(tmp_path: Path):
    from engram.eval.locomo_cli import REPOSITORY
    from engram.service.cli import app

    beir = write_beir(tmp_path / "conv-7")
    source = _written(tmp_path / "locomo10.json", [sample(QUESTIONS)])
    inside = CliRunner().invoke(
        app, ["locomo-enrich", "--locomo", str(source), "--beir", str(beir), "--out", str(REPOSITORY / "x")]
    )
    assert inside.exit_code == 2 and not (REPOSITORY / "x").exists()
    ok = CliRunner().invoke(
        app, ["locomo-enrich", "--locomo", str(source), "--beir", str(beir), "--out", str(tmp_path / "o")]
    )
    assert ok.exit_code == 0, ok.output
    assert load_query_categories(tmp_path / "o")["conv-7:q0"] == "temporal"
    garbled = CliRunner().invoke(
        app,
        [
            "locomo-enrich",
            "--locomo",
            str(_written(tmp_path / "g.json", [1, 2])),
            "--beir",
            str(beir),
            "--out",
            str(tmp_path / "g"),
        ],
    )
    assert garbled.exit_code == 2 and "not LoCoMo's JSON" in garbled.output
    missing = CliRunner().invoke(
        app,
        ["locomo-enrich", "--locomo", str(tmp_path / "nope.json"), "--beir", str(beir), "--out", str(tmp_path / "p")],
    )
    assert missing.exit_code == 2


def _written(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path
