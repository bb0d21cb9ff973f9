"""detect-secrets' provider detectors, started from the `plugin` table of `rules.toml`.

Each plugin runs in-process through ``analyze_string`` (no files, no global settings,
no network verification), and only when its cheap gate says it could match: the
assignment-style plugins' patterns start with a look-behind tried at every position,
so the gate keeps them off ordinary text. A plugin that cannot be imported or started
leaves the detector unable to judge (:data:`DETECTOR_UNAVAILABLE`): it then refuses
every text.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .catalogue import TABLES
from .entropy import RUN_MIN, RUN_RE
from .shapes import alnum_with_digit, has_digit, looks_placeholder, mixed_alnum

#: Rule ids for a detector that cannot judge: the text is refused, never passed as clean.
DETECTOR_UNAVAILABLE = "detector-unavailable"
DETECTOR_FAILED = "detector-failed"


class Scan:
    """Per-call lazily computed views of one text: its ASCII-lowered copy (same
    offsets) and its base64 runs."""

    __slots__ = ("text", "_low", "_runs", "_longest")

    _ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}

    def __init__(self, text: str) -> None:
        self.text = text
        self._low: str | None = None
        self._runs: list[re.Match[str]] | None = None
        self._longest: int | None = None  # the longest run's length, asked by several gates

    @property
    def low(self) -> str:
        if self._low is None:
            # On ASCII text str.lower() is exactly the ASCII lowering, and much faster.
            self._low = self.text.lower() if self.text.isascii() else self.text.translate(self._ASCII_LOWER)
        return self._low

    @property
    def runs(self) -> list[re.Match[str]]:
        if self._runs is None:
            # A run holds no whitespace, so a text whose whitespace-separated words are
            # all shorter than a run has none: one split, where the pattern is tried at
            # every position (half the time of a clean scan of prose).
            if max(map(len, self.text.split()), default=0) < RUN_MIN:
                self._runs = []
            else:
                self._runs = list(RUN_RE.finditer(self.text))
        return self._runs

    def longest_run(self) -> int:
        if self._longest is None:
            self._longest = max((m.end() - m.start() for m in self.runs), default=0)
        return self._longest


Gate = Callable[[Scan], bool]

# Sanity checks on what a plugin yields, named by the table's `extra`.
_EXTRA: dict[str, Callable[[str], bool]] = {
    "alnum-with-digit": lambda s: alnum_with_digit(s.strip(' \t\r\n=:"')),
    "not-placeholder": lambda s: not looks_placeholder(s),
    "has-digit": has_digit,
    "mixed": mixed_alnum,
}


@dataclass(frozen=True)
class Plugin:
    """One started detect-secrets plugin, with the lower-case literals one of which must
    occur for it to match (None: no literal) and the cheap gate it runs behind."""

    name: str
    plugin: Any
    triggers: tuple[str, ...] | None
    gate: Gate
    extra: Callable[[str], bool] | None

    def find(self, scan: Scan) -> str | None:
        """Its rule id when it matches, :data:`DETECTOR_FAILED` when it raises."""
        if not self.gate(scan):
            return None
        try:
            for found in self.plugin.analyze_string(scan.text):
                if self.extra is None or self.extra(found):
                    return self.name
        except Exception:  # a plugin bug must not leak the text, nor pass it as clean
            return DETECTOR_FAILED
        return None


def _gate(entry: Mapping[str, Any]) -> Gate:
    plain = [re.compile(p) for p in entry.get("gate", ())]
    lowered = [re.compile(p) for p in entry.get("gate_lower", ())]
    min_run = int(entry.get("min_run", 0))

    def matches(s: Scan) -> bool:
        if not (plain or lowered):
            return True
        return any(rx.search(s.text) for rx in plain) or any(rx.search(s.low) for rx in lowered)

    if min_run:
        return lambda s: s.longest_run() >= min_run and matches(s)
    return matches


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def load_plugins() -> tuple[tuple[Plugin, ...], str | None]:
    """The table's plugins, started, and the fault that leaves the detector unable to
    judge (None when every plugin started)."""
    plugins: list[Plugin] = []
    fault: str | None = None
    for entry in TABLES["plugin"]:
        module_name, _, class_name = entry["class"].partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            instance = cls()
        except Exception:  # detect-secrets is a declared dependency: without it, fail closed
            fault = DETECTOR_UNAVAILABLE
            continue
        triggers = tuple(entry["triggers"]) if "triggers" in entry else None
        extra = _EXTRA[entry["extra"]] if "extra" in entry else None
        plugins.append(Plugin("ds-" + _slug(cls.secret_type), instance, triggers, _gate(entry), extra))
    return tuple(plugins), fault
