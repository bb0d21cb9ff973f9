"""The operator console open beside a load run, polled as a browser showing it would be.

Why: the console must not slow MCP calls. `engram bench --console` runs the load run a
second time on the same engine with the console served on its own listener (as
`engram serve --console-port` does) and a logged-in client refreshing the live parts
of the scopes and replicas pages at the pages' own pace, so the two runs compare the
MCP figures with and without an operator watching.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What the scopes and replicas pages poll (htmx, every POLL_S seconds).
LIVE_PARTS = ("/fragments/scopes", "/fragments/replicas")


@dataclass
class Polls:
    """How many refreshes the console answered during the run, and how long they took."""

    count: int = 0
    seconds: float = 0.0
    failures: int = 0

    def as_json(self) -> dict[str, Any]:
        mean = round(1000 * self.seconds / self.count, 2) if self.count else None
        return {"polls": self.count, "mean_poll_ms": mean, "failed_polls": self.failures}


@contextlib.contextmanager
def console_polled(engine: Any, data_dir: Path) -> Iterator[Polls]:
    """Serve the console for ``engine`` on a free loopback port, log in with a link it
    minted, and poll its live parts until the block ends."""
    import httpx2

    from engram.service.console.app import POLL_S, ConsoleConfig
    from engram.service.console.listener import ConsoleListener
    from engram.service.settings import Settings

    settings = Settings(data_dir=data_dir, console_port=0, log_level="warning")
    config = ConsoleConfig(data_dir / "audit.jsonl", [], secure_cookie=False, started_at=time.time())
    listener = ConsoleListener(engine, settings, config).start()
    polls, stop = Polls(), threading.Event()

    def poll() -> None:
        with httpx2.Client(base_url=listener.base_url(), timeout=30.0) as client:
            client.get(listener.mint_link({})["url"].removeprefix(listener.base_url()))
            while not stop.wait(POLL_S):
                for part in LIVE_PARTS:
                    started = time.perf_counter()
                    answer = client.get(part)
                    polls.seconds += time.perf_counter() - started
                    polls.count += 1
                    polls.failures += answer.status_code != 200

    poller = threading.Thread(target=poll, name="console-poller", daemon=True)
    poller.start()
    try:
        yield polls
    finally:
        stop.set()
        poller.join(timeout=30)
        listener.stop()
