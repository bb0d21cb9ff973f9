"""Secret scanning: material that must never be stored (contract section 4).

A leaf room: it imports only `engram.models`. Its rules are data (`rules.toml`: about
sixty provider formats, context and assignment rules, the detect-secrets plugins it
runs, the placeholder vocabulary), compiled by a small matcher (`rules.py`) and run in
priority order by the scanner (`scanner.py`), with a high-entropy layer last
(`entropy.py`). Every answer is a rule id, never the matched value.

Other rooms call one function, :func:`scan` (`findings.py`): its :class:`SecretScan`
refuses (:class:`SecretRefused`, ``SECRET_DETECTED``) or gives each value's finding;
``tests/deploy/test_rooms.py`` keeps them off the modules inside.
"""

from .findings import SecretScan, scan
from .scanner import SecretRefused

__all__ = [
    "SecretRefused",
    "SecretScan",
    "scan",
]
