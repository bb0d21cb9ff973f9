"""The console of one replica of two sharing a PostgreSQL store: the registry shows
both, and a record forgotten while the other was down stays a pending purge that the
page says the absent replica still owes."""

from __future__ import annotations

import pytest
from console_support import Served, Tab, artefacts, engram, forget, scripted_history

pytest.importorskip("playwright", reason="playwright is not installed (the test extra)")


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, postgres_cluster):
    root = tmp_path_factory.mktemp("console-pg")
    (root / "a").mkdir()
    shared = ("--database-url", postgres_cluster.create_database(), "--key-dir", str(root / "keys"))
    enabled = engram("admin", *shared, "tenant", "enable", "acme", "-d", str(root / "a"))
    assert enabled.returncode == 0, enabled.stderr
    first = Served(root / "a", *shared)
    second = Served(root / "b", *shared, console=False)
    try:
        history = scripted_history(first.base + "/mcp", admitted=2, forgets=False)
        absent = (root / "b" / "replica_id").read_text().strip()
        second.close()  # down, still registered: it owes the purge of what is forgotten now
        forget(first.base + "/mcp", history.records[-1])
        yield first, absent, history.records[-1]
    finally:
        second.close()
        first.close()


def test_the_console_shows_two_replicas_and_the_purge_the_absent_one_owes(chromium, replicas, tmp_path_factory):
    served, absent, forgotten = replicas
    tab = Tab(chromium)
    try:
        tab.page.goto(served.link())
        tab.page.goto(served.console + "/replicas")
        assert tab.page.locator("#replicas-table tbody tr").count() == 2
        assert tab.page.locator(f'#replicas-table tr[data-replica="{absent}"]').count() == 1
        purge = tab.page.locator(f'#purges-table tr[data-record="{forgotten}"]')
        assert purge.count() == 1 and absent in purge.inner_text()
        # The heartbeats refresh in place: htmx polls the registry without a reload.
        with tab.page.expect_response(lambda r: r.url.endswith("/fragments/replicas"), timeout=10_000) as polled:
            pass
        assert polled.value.status == 200 and absent in polled.value.text()
        tab.page.goto(served.console + "/")
        assert tab.page.locator("#store-kind").inner_text().startswith("postgresql")
        tab.page.goto(served.console + "/replicas")
        tab.page.screenshot(path=str(artefacts(tmp_path_factory) / "replicas-postgresql.png"), full_page=True)
        assert tab.errors == []
    finally:
        tab.close()
