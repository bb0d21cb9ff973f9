"""What a secret scan finds: the room's one entry for every other room.

Why one entry: the engine needs two answers from a scan, a refusal (a tool call, a
transition's reason, an adjudication: nothing is kept when any string looks like a
secret) and, for a bulk load, the finding of each record (the clean ones are kept, the
others reported by position). Both come from :func:`scan`, so the engine imports one
name and the rules, the plugins and the matcher stay this room's own business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .scanner import SecretRefused, detector, find_secret_each, find_secret_in, strings


@dataclass(frozen=True)
class SecretScan:
    """A scan of some values; each answer scans them when asked, and no further than it
    needs: a refusal stops at the first secret, findings scan each distinct string once."""

    values: tuple[Any, ...]

    @property
    def findings(self) -> list[str | None]:
        """For each value, in order, the id of the first rule any of its strings matched
        (keys and values, however deeply nested), or None."""
        return find_secret_each(self.values)

    def refuse(self) -> None:
        """Contract section 4: raise :class:`SecretRefused` (``SECRET_DETECTED``, with the
        rule id, never the value) when any value holds a secret, or the detector cannot
        judge. Callers scan everything the service would keep, before any write."""
        rule = find_secret_in(strings(self.values))
        if rule is not None:
            raise SecretRefused(rule)


def scan(*values: Any) -> SecretScan:
    """A scan of ``values``. The rules and the detect-secrets plugins are loaded on the
    first scan; the engine's warm-up asks for one of nothing, so that no call after
    ``/readyz`` pays their imports."""
    detector()
    return SecretScan(values)
