"""The scanner: every layer's rules in priority order, run on one text at a time.

`SecretDetector.find(text)` answers the id of the first rule that matches (for example
``"aws-access-key"`` or ``"pem-private-key"``) or None. It never returns, logs or keeps
the matched value: callers refuse the material with the constant
``ErrorCode.SECRET_DETECTED`` and may record only the rule id.

Speed: every step comes with the literals that must occur for it to match; a scan finds
every literal present in one pass over the lowered text (an Aho-Corasick automaton of
all of them) and runs only the steps they enable, in order, and the high-entropy layer
last. Patterns start with a literal (the regex engine's prefix scan does the work), run
on the text or its ASCII-lowered copy instead of using IGNORECASE, and check left
boundaries in Python on the rare candidates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ahocorasick

from engram.models.codes import ContractError, ErrorCode

from .checks import url_credentials
from .entropy import HEX, TOKEN, high_entropy
from .plugins import DETECTOR_FAILED, DETECTOR_UNAVAILABLE, Plugin, Scan, load_plugins
from .rules import RULES, Rule

#: One rule (or plugin) run on a text: the rule id it matched, or None.
Step = Callable[[Scan], "str | None"]

_URL_IDS = ("connection-string", "url-credentials")


def _rule_step(rule: Rule) -> Step:
    return lambda scan: rule.id if rule.hits(scan.text, scan.low) else None


def _url_step(scan: Scan) -> str | None:
    return url_credentials(scan.text)


def _trigger_automaton(steps: Sequence[tuple[tuple[str, ...], Step]]) -> tuple[Any, frozenset[int]]:
    """An automaton of every step's literals (each found literal's value: the steps it
    enables), and the steps with an empty literal, which every text enables."""
    by_literal: dict[str, set[int]] = {}
    always: set[int] = set()
    for i, (triggers, _) in enumerate(steps):
        for literal in triggers:
            (by_literal.setdefault(literal, set()) if literal else always).add(i)
    automaton = ahocorasick.Automaton()
    for literal, enabled in by_literal.items():
        automaton.add_word(literal, frozenset(enabled))
    automaton.make_automaton()
    return automaton, frozenset(always)


@dataclass(frozen=True)
class SecretDetector:
    """Every layer's rules in priority order, ready to scan one text at a time.

    ``fault`` is the rule id every text is refused with when the detector cannot judge
    (a plugin that did not start). Built once per process by :func:`detector`.
    """

    plugins: tuple[Plugin, ...]
    fault: str | None
    steps: tuple[tuple[tuple[str, ...], Step], ...] = field(init=False)
    triggers: Any = field(init=False)  # the automaton of every step's literals
    always: frozenset[int] = field(init=False)  # steps every text enables

    def __post_init__(self) -> None:
        def rules(*layers: str) -> list[tuple[tuple[str, ...], Step]]:
            return [(r.triggers, _rule_step(r)) for layer in layers for r in RULES[layer]]

        steps = (
            rules("provider", "context")
            + [(("://",), _url_step)]
            + rules("assignment", "prose", "environment")
            + [(p.triggers or ("",), p.find) for p in self.plugins]
        )
        object.__setattr__(self, "steps", tuple(steps))
        automaton, always = _trigger_automaton(steps)
        object.__setattr__(self, "triggers", automaton)
        object.__setattr__(self, "always", always)

    @classmethod
    def load(cls) -> SecretDetector:
        """The rules with detect-secrets' plugins (about 0.1 s of imports)."""
        plugins, fault = load_plugins()
        return cls(plugins, fault)

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """Every id :meth:`find` can answer."""
        rules = [r.id for layer in RULES.values() for r in layer]
        plugins = [p.name for p in self.plugins]
        return tuple(dict.fromkeys([*rules, *_URL_IDS, *plugins, TOKEN, HEX, DETECTOR_UNAVAILABLE, DETECTOR_FAILED]))

    def find(self, text: str) -> str | None:
        """The id of the first rule that matches (e.g. "aws-access-key",
        "pem-private-key"), or None. Never returns or logs the secret itself."""
        if not isinstance(text, str):
            raise TypeError("find_secret expects str")
        if self.fault is not None and text:
            return self.fault
        if len(text) < 8:
            return None
        try:
            return self._scan(text)
        except Exception:  # a rule bug fails closed: the text is refused, not passed
            return DETECTOR_FAILED

    def _scan(self, text: str) -> str | None:
        scan = Scan(text)
        for i in sorted(self._enabled_steps(scan.low)):
            hit = self.steps[i][1](scan)
            if hit is not None:
                return hit
        return high_entropy(text, scan.runs)

    def _enabled_steps(self, low: str) -> set[int]:
        """The steps whose literals occur in ``low`` (the lowered text)."""
        enabled = set(self.always)
        for _, steps in self.triggers.iter(low):
            enabled |= steps
        return enabled


@functools.cache
def detector() -> SecretDetector:
    """The process's detector, loaded on first use; the engine's warm-up asks for it, so
    no call after ``/readyz`` pays the plugins' imports."""
    return SecretDetector.load()


# --------------------------------------------------------------------------------------
# what the room's entry (findings.scan) is built on


class SecretRefused(ContractError):
    """``SECRET_DETECTED``, carrying the id of the rule that fired (never the value), so
    a log line or a summary can say why; the envelope stays the contract's constant one."""

    def __init__(self, rule: str) -> None:
        super().__init__(ErrorCode.SECRET_DETECTED)
        self.rule = rule

    def __reduce__(self) -> tuple[type[SecretRefused], tuple[str]]:
        return (SecretRefused, (self.rule,))


def rule_names() -> tuple[str, ...]:
    """Every rule id :func:`find_secret` can answer."""
    return detector().rule_ids


def find_secret(text: str) -> str | None:
    """The id of the first rule that matches (e.g. "aws-access-key", "pem-private-key"),
    or None. Never returns or logs the secret itself."""
    return detector().find(text)


def find_secret_in(texts: Iterable[str]) -> str | None:
    """The first rule id matched by any of `texts` (None when all are clean)."""
    for t in texts:
        if isinstance(t, str):
            hit = find_secret(t)
            if hit is not None:
                return hit
    return None


def find_secret_each(values: Iterable[Any]) -> list[str | None]:
    """For each of `values`, what :meth:`.findings.SecretScan.refuse` would refuse it for: the first rule
    id matched by any of its strings (keys and values, however deeply nested), or None.

    Why: the records of one batch repeat most of their strings (every key, fixed values
    such as a purpose or a retention rule), so each distinct string is scanned once and
    its verdict reused; a verdict depends on the string alone, so the answers are the
    ones a scan of each value by itself gives."""
    verdicts: dict[str, str | None] = {}
    out: list[str | None] = []
    for value in values:
        hit = None
        for text in strings(value):
            if text in verdicts:
                verdict = verdicts[text]
            else:
                verdict = verdicts[text] = find_secret(text)
            if verdict is not None:
                hit = verdict
                break
        out.append(hit)
    return out


def strings(value: Any) -> list[str]:
    """Every string in ``value``, keys included, depth first in order (a key before its
    item). A list rather than a generator: a generator per nested member cost more than
    scanning the strings (bulk ingest examines hundreds of members a record)."""
    out: list[str] = []
    _collect_strings(value, out)
    return out


def _collect_strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if type(key) is str:  # nearly every key: no call for it
                out.append(key)
            else:
                _collect_strings(key, out)
            if type(item) is str:
                out.append(item)
            else:
                _collect_strings(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if type(item) is str:
                out.append(item)
            else:
                _collect_strings(item, out)
