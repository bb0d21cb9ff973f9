"""The speaker a record's primary text names when it opens as a transcript line."""

from __future__ import annotations

import pytest
from ranking_support import doc

from engram.ranking.documents import speaker


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Caroline: I went to a support group yesterday.", "Caroline"),
        ("  Mary Anne Smith:  we ship on Friday", "Mary Anne Smith"),
        ("Zoë: ça va", "Zoë"),
        ("O'Brien: the tide was late", "O'Brien"),
    ],
)
def test_a_transcript_line_names_its_speaker(text: str, name: str):
    assert speaker(text) == name


@pytest.mark.parametrize(
    "text",
    [
        "caroline: lower case is not a name",
        "Four Capitalised Words Here: too long for a name",
        "The meeting moved: see the notes",  # "The meeting moved" has a lower-case word
        "Caroline:no space after the colon",
        "Caroline:",  # nothing said
        "2023: a year, not a speaker",
        "Incident ERR_1234a: the deploy failed",  # a label with a code, not a name
        "Ticket KX-1234: reported by Ada",
        "A reply that mentions Caroline: later in the line",
        "",
    ],
)
def test_other_text_names_no_speaker(text: str):
    assert speaker(text) == ""


def test_the_document_reads_its_speaker_from_the_primary_text_only():
    assert doc("s", "r", "Jon: I lost my job", context="Gina: sorry to hear").speaker == "Jon"
    assert doc("s", "r", "lost my job", context="Gina: sorry to hear").speaker == ""
