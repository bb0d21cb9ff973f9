"""The rank receipts of this process's recent searches, for the operator to pick.

Why: an operator asks "why did this record rank third?" about a search an agent made,
and the audit log (digests only) names that search by its rank receipt's digest. The
receipt is not a stored effect (a search writes nothing), so the engine keeps the last
few in memory, with the scope and arguments a replay needs; the operator surface hands
back the receipt and a replay, never the arguments (they hold the query). Only a
server with an operator console keeps them (`Operator.keep_recent_searches`), from the
console's start: the queries of a server without one are held no longer than their
call. Like the audit file beside it, this is one process's view: a restart or another
replica starts with none, and an older search's receipt is gone once newer ones push
it out. Nothing here is written to disk.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from engram.models.scope import Scope

#: How many searches are kept (each a receipt of one page: a few kilobytes).
KEPT = 512


@dataclass(frozen=True)
class RecentSearch:
    """One search as a replay needs it: where it ran, what it asked, what it returned."""

    scope: Scope
    arguments: dict[str, Any]
    receipt: dict[str, Any]


class RecentSearches:
    """A bounded, thread-safe map of rank receipt digest to search, oldest out first."""

    def __init__(self) -> None:
        self._kept = 0  # none until `keep`
        self._lock = threading.Lock()
        self._searches: OrderedDict[str, RecentSearch] = OrderedDict()

    @property
    def keeping(self) -> bool:
        return self._kept > 0

    def keep(self, kept: int = KEPT) -> None:
        """From now on keep the last ``kept`` searches."""
        self._kept = kept

    def remember(self, scope: Scope, arguments: dict[str, Any], receipt: dict[str, Any]) -> None:
        if not self.keeping:
            return
        with self._lock:
            self._searches[receipt["receipt_digest"]] = RecentSearch(scope, arguments, receipt)
            self._searches.move_to_end(receipt["receipt_digest"])
            while len(self._searches) > self._kept:
                self._searches.popitem(last=False)

    def get(self, receipt_digest: str) -> RecentSearch | None:
        with self._lock:
            return self._searches.get(receipt_digest)
