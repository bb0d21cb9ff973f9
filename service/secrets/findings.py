"""What a secret scan found: the room's one entry for every other room.

Why one entry: the engine needs two answers from the same scan, a refusal (a tool call,
a transition's reason, an adjudication: nothing is kept when any string looks like a
secret) and, for a bulk load, the finding of each record (the clean ones are kept, the
others reported by position). Both come from :func:`scan`, so the engine imports one
name and the rules, the plugins and the matcher stay this room's own business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .scanner import SecretRefused, detector, find_secret_each


@dataclass(frozen=True)
class SecretScan:
    """The findings of one scan: for each value given, in order, the id of the first rule
    any of its strings matched (keys and values, however deeply nested), or None."""

    findings: tuple[str | None, ...]

    def refuse(self) -> None:
        """Contract section 4: raise :class:`SecretRefused` (``SECRET_DETECTED``, with the
        rule id, never the value) when any value holds a secret, or the detector cannot
        judge. Callers scan everything the service would keep, before any write."""
        rule = next((finding for finding in self.findings if finding is not None), None)
        if rule is not None:
            raise SecretRefused(rule)


def scan(*values: Any) -> SecretScan:
    """Scan ``values`` (each distinct string once: a batch's records repeat most of
    theirs). With no values it only loads the rules and the detect-secrets plugins, as
    the engine's warm-up does, so that no call after ``/readyz`` pays their imports."""
    detector()
    return SecretScan(tuple(find_secret_each(values)))
