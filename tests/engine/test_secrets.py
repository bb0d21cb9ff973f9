"""Secret detection (contract section 4): recall on fake secrets, silence on ordinary text.

Fixtures live in tests/fixtures/secrets/: `positives.txt` and `negatives.txt` hold one
case per line as `<case id> | <text>` (a literal backslash-n is a newline), and the
multi-line private keys (and public material that must pass) are files of their own.
Every secret there is fake: random bytes in the shape of the real thing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.service.secrets import SecretRefused, scan
from engram.service.secrets import scanner as secrets_module
from engram.service.secrets.entropy import RUN_RE
from engram.service.secrets.plugins import Scan
from engram.service.secrets.scanner import find_secret, find_secret_in, rule_names

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "secrets"
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _cases(name: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        case_id, text = line.split(" | ", 1)
        out.append((case_id.strip(), text.replace("\\n", "\n")))
    ids = [c for c, _ in out]
    assert len(ids) == len(set(ids)), f"duplicate case ids in {name}"
    return out


POSITIVES = _cases("positives.txt")
NEGATIVES = _cases("negatives.txt")
PRIVATE_KEY_FILES = sorted(p.name for p in FIXTURES.iterdir() if p.name.startswith("private_key_"))
PUBLIC_FILES = sorted(p.name for p in FIXTURES.iterdir() if p.name.startswith("public_"))


# ------------------------------------------------------------------ positives


def test_corpus_is_large_and_distinct() -> None:
    texts = [t for _, t in POSITIVES]
    assert len(set(texts)) == len(texts)
    assert len(texts) + len(PRIVATE_KEY_FILES) >= 60


@pytest.mark.parametrize(("case_id", "text"), POSITIVES, ids=[c for c, _ in POSITIVES])
def test_positive_detected(case_id: str, text: str) -> None:
    rule = find_secret(text)
    assert rule is not None, f"{case_id} not detected"
    # The answer is a fixed rule name: it never carries the material itself.
    assert rule in rule_names()


@pytest.mark.parametrize(("case_id", "text"), POSITIVES, ids=[c for c, _ in POSITIVES])
def test_positive_detected_inside_prose(case_id: str, text: str) -> None:
    wrapped = f"Notes from the deploy on Tuesday.\n{text}\nRemember to update the runbook afterwards."
    assert find_secret(wrapped) is not None


@pytest.mark.parametrize("name", PRIVATE_KEY_FILES)
def test_private_key_files(name: str) -> None:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert find_secret(text) == "pem-private-key"
    # still caught when JSON-escaped onto one line
    assert find_secret(json.dumps({"key": text})) == "pem-private-key"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("AKIA" + "QWERTYUIOPASDFGH", "aws-access-key"),
        ("-----BEGIN RSA PRIVATE KEY-----", "pem-private-key"),
        ("ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "github-token"),
        ("postgres://app:" + "s3cr3tPass" + "@db:5432/x", "connection-string"),
        ("https://bob:" + "Hunter22x" + "@example.com/", "url-credentials"),
        ("DB_PASSWORD=" + "supersecret", "secret-assignment"),
        ("Cookie: sid=" + "8f7a6b5c4d3e2f1a", "session-cookie"),
    ],
)
def test_rule_names(text: str, rule: str) -> None:
    assert find_secret(text) == rule


def test_find_secret_in() -> None:
    assert find_secret_in([]) is None
    assert find_secret_in(["plain words", "more plain words"]) is None
    assert find_secret_in(["plain words", "api_key=" + "Zx9Qw8Er7Ty6Ui5O"]) == "secret-assignment"


def test_never_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        for _, text in POSITIVES:
            find_secret(text)
    assert caplog.records == []


def test_rejects_non_str() -> None:
    with pytest.raises(TypeError):
        find_secret(b"password=hunter22")  # type: ignore[arg-type]


# ------------------------------------------------------------------ negatives


@pytest.mark.parametrize(("case_id", "text"), NEGATIVES, ids=[c for c, _ in NEGATIVES])
def test_negative_not_flagged(case_id: str, text: str) -> None:
    assert find_secret(text) is None, f"{case_id} flagged as {find_secret(text)}"


@pytest.mark.parametrize("name", PUBLIC_FILES)
def test_public_material_not_flagged(name: str) -> None:
    assert find_secret((FIXTURES / name).read_text(encoding="utf-8")) is None


def test_short_and_empty() -> None:
    assert find_secret("") is None
    assert find_secret("pw=x") is None


def test_own_digests_and_ids() -> None:
    """This service's own `sha256:<hex>` digests and `mem_<base32>` record ids (see
    models/digests.py) are content addresses, never secrets."""
    for i in range(500):
        raw = hashlib.sha256(f"engram/record/v1\0{i}".encode()).digest()
        d = "sha256:" + raw.hex()
        rid = "mem_" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()
        assert find_secret(d) is None
        assert find_secret(rid) is None
        assert find_secret(f'{{"record_digest": "{d}", "record_id": "{rid}"}}') is None
        assert find_secret(f"record_digest={d} record_id={rid}") is None


def test_uuids() -> None:
    for _ in range(500):
        u = uuid.uuid4()
        assert find_secret(f"id {u} and {str(u).upper()} and {u.hex}") is None


# ------------------------------------------------------------------ dev collections


def _collection_texts(path: Path) -> list[str]:
    out: list[str] = []
    for fn, corpus in (("corpus.jsonl", True), ("queries.jsonl", False)):
        f = path / fn
        if not f.exists():
            continue
        with f.open(encoding="utf-8") as fh:
            for line in fh:
                o = json.loads(line)
                text = o.get("text") or ""
                out.append(((o.get("title") or "") + "\n" + text) if corpus else text)
    return out


def _collections() -> list[Path]:
    if not DATA.is_dir():
        return []
    return sorted(p for p in DATA.iterdir() if (p / "corpus.jsonl").exists())


def test_no_document_of_the_dev_collections_is_refused() -> None:
    """Every document of every collection under ../shared/data (corpus.jsonl, LoCoMo's
    conversations included) is stored: a refusal names the document and the rule."""
    corpora = sorted(DATA.rglob("corpus.jsonl")) if DATA.is_dir() else []
    if not corpora:
        pytest.skip(f"no dev collections under {DATA}")
    refused = []
    for path in corpora:
        for line in path.read_text(encoding="utf-8").splitlines():
            doc = json.loads(line)
            rule = find_secret_in([doc.get("title") or "", doc.get("text") or ""])
            if rule is not None:
                refused.append(f"{path.parent.name}/{doc['_id']}: {rule}")
    assert refused == []


SCIENTIFIC = _cases("scientific.txt")


@pytest.mark.parametrize(("case_id", "text"), SCIENTIFIC, ids=[c for c, _ in SCIENTIFIC])
def test_scientific_text_is_never_refused(case_id: str, text: str) -> None:
    """Gene and protein names, cell phenotypes as marker chains, accession numbers,
    formulas, DOIs, p-values, sequences: an abstract is not a secret."""
    assert find_secret(text) is None, case_id


# ------------------------------------------------------------------ prose stays clean


def _prose() -> list[str]:
    """Prose from the dev collections when they are beside the repository, else the
    fixture prose; throughput is measured by `engram bench`, not here."""
    texts: list[str] = []
    for path in _collections():
        texts.extend(_collection_texts(path))
        if sum(map(len, texts)) > 2_000_000:
            break
    return texts or [t for case_id, t in NEGATIVES if case_id.startswith(("prose", "doi"))]


def test_prose_chunks_are_clean() -> None:
    texts = _prose()
    assert texts, "no prose to scan"
    prose = "\n".join(texts)
    chunks = [prose[i : i + 65536] for i in range(0, min(len(prose), 4_000_000), 65536)]
    assert chunks and all(find_secret(c) is None for c in chunks)


@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000,
        "A1b2" * 50_000,
        "=" * 100_000,
        "password=" * 20_000,
        "://" * 60_000,
        "//:" * 60_000,
        "eyJ" + "a" * 200_000,
        "eyJ" + "a." * 100_000,
        "-" * 200_000,
        "key: " * 40_000,
        "Server=x;" * 20_000,
        "https://u:" * 20_000,
        "\n" * 200_000,
        "x@" * 100_000,
        ("//registry/" * 5_000) + ":_authToken=",
        "0123456789abcdef" * 10_000,
        "é€😀" * 50_000,
    ],
    ids=lambda t: f"{t[:12]!r}x{len(t)}",
)
def test_adversarial_inputs_are_answered(text: str) -> None:
    """Pathological shapes (a quadratic pattern would hang here, not pass) get an answer
    from the fixed rule set; their speed is `engram bench`'s business."""
    result = find_secret(text)
    assert result is None or result in rule_names()


# ------------------------------------------------------------------ properties


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    result = find_secret(text)
    assert result is None or result in rule_names()


_FRAGMENTS = st.sampled_from(
    [
        "password",
        "=",
        ":",
        " ",
        "\n",
        '"',
        "'",
        "://",
        "@",
        "eyJ",
        ".",
        "sk-",
        "ghp_",
        "AKIA",
        "Bearer ",
        "Authorization: ",
        "-----BEGIN ",
        "PRIVATE KEY-----",
        "sha256:",
        "token",
        "api_key",
        "Cookie: ",
        ";",
        "Server=",
        "Password=",
        "0123456789abcdef",
        "QWERTYuiop1234",
        "é",
        "😀",
        "\x00",
        "\t",
        "\\",
        "$",
        "{",
        "}",
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=20)), max_size=400))
def test_never_raises_on_secretish_soup(parts: list[str]) -> None:
    result = find_secret("".join(parts))
    assert result is None or result in rule_names()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.text(min_size=1, max_size=64), st.integers(min_value=1_000, max_value=4_000))
def test_never_raises_on_long_text(unit: str, times: int) -> None:
    result = find_secret(unit * times)
    assert result is None or result in rule_names()


_DETECTOR = secrets_module.detector()
_LITERAL_STEPS = [(literal, i) for i, (triggers, _) in enumerate(_DETECTOR.steps) for literal in triggers]
_LITERALS = st.sampled_from(sorted({literal for literal, _ in _LITERAL_STEPS}))


_ANY_CHARACTER = st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            _LITERALS,
            st.text(alphabet="abcdefgkosy_-.:/=~0123456789 ", max_size=6),
            st.text(alphabet=_ANY_CHARACTER, max_size=4),  # astral characters, lone surrogates
        ),
        max_size=10,
    )
)
def test_trigger_pass_finds_every_literal_present(parts: list[str]) -> None:
    """The trigger pass (one automaton of every literal, overlapping matches included)
    enables exactly the steps a test of every literal enables."""
    low = "".join(parts)
    every = {i for literal, i in _LITERAL_STEPS if literal in low}
    assert _DETECTOR._enabled_steps(low) == every


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="AZaz09+/_-=", min_size=1, max_size=30),
            st.text(alphabet=" \t\n\x1c\x85\u2028\u3000.,:;\"'", min_size=1, max_size=2),
            st.text(alphabet=_ANY_CHARACTER, max_size=4),
        ),
        max_size=12,
    )
)
def test_a_scans_views_are_the_whole_computations(parts: list[str]) -> None:
    """A scan's lowered copy and base64 runs, with their shortcuts (ASCII text lowered by
    str.lower, no pattern run over text without a long enough word), are the full
    computations: the ASCII lowering, and every match of the run pattern."""
    text = "".join(parts)
    view = Scan(text)
    assert view.low == text.translate(Scan._ASCII_LOWER)
    assert [m.span() for m in view.runs] == [m.span() for m in RUN_RE.finditer(text)]


_TELEGRAM = next(p for p in _DETECTOR.plugins if p.name == "ds-telegram-bot-token")


@settings(max_examples=50, deadline=None)
@given(st.from_regex(r"[0-9]{8,10}:[0-9A-Za-z_\-]{35}", fullmatch=True))
def test_the_telegram_gate_passes_every_token(token: str) -> None:
    """The Telegram plugin's gate (eight digits, a colon, a 35-character run) holds for
    every token its pattern finds, and this service's digests stay behind it."""
    view = Scan(f"bot token {token} here")
    assert list(_TELEGRAM.plugin.analyze_string(view.text)) and _TELEGRAM.gate(view)
    assert not _TELEGRAM.gate(Scan("sha256:" + hashlib.sha256(token.encode()).hexdigest()))


def test_find_secret_each_answers_as_each_value_alone() -> None:
    clean = {"payload": {"text": "a plain note about ledgers", "ref": "doc:1"}, "tags": ["x", "y"]}
    leaky = {"payload": {"text": "plain", "key": "AKIAIOSFODNN7EXAMPLE"}, "tags": ["a plain note about ledgers"]}
    values = [clean, leaky, clean, {"nested": [leaky]}]
    alone = [find_secret_in(secrets_module.strings(v)) for v in values]
    assert secrets_module.find_secret_each(values) == alone
    assert alone[0] is None and alone[1] is not None and alone[3] == alone[1]


def test_one_scan_gives_each_finding_and_the_refusal() -> None:
    """The room's one entry: a scan of several values answers each one's finding, and
    refuses (with the rule, never the value) when any of them holds a secret."""
    leaky = {"payload": {"key": "AKIAIOSFODNN7EXAMPLE"}}
    found = scan("a plain note", leaky, ["plain", {"note": "api_key=" + "Zx9Qw8Er7Ty6Ui5O"}])
    assert found.findings == [None, find_secret("AKIAIOSFODNN7EXAMPLE"), "secret-assignment"]
    with pytest.raises(SecretRefused) as refused:
        found.refuse()
    assert refused.value.rule == found.findings[1] and "AKIA" not in str(refused.value)
    scan("a plain note", {"tags": ["x"]}).refuse()  # nothing found: no refusal
    assert scan().findings == []
