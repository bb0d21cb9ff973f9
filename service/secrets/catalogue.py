"""The scanner's rules as data: `rules.toml`, read once at import.

Why a data file: a provider's key format is a fact about that provider (a prefix, a
length, an alphabet), not code. Adding one is a table entry with its id, pattern and
the named check it needs; `rules.py` turns the tables into compiled rules and
`plugins.py` starts the detect-secrets plugins they list.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

#: Every table of `rules.toml`, by name (`provider`, `context`, `assignment`, ...).
TABLES: dict[str, Any] = tomllib.loads(resources.files(__package__).joinpath("rules.toml").read_text("utf-8"))

#: Word lists the checks consult (placeholder values, ...).
VOCABULARY: dict[str, list[str]] = TABLES["vocabulary"]
