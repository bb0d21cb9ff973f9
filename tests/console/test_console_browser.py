"""The operator console in a real browser, against a real `engram serve` (SQLite).

After a scripted history over MCP (captures, admissions, a withdraw, a forget, a
search) and an operator's dispute: every page loads with no browser console error and
shows the right counts; a login link works once; the cookie carries its flags; a POST
without the CSRF token is refused; the console's cookie opens nothing on /mcp and the
console serves no /mcp; and no record's text or the query appears in any answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from console_support import API, PAGES, ROOT, Served, Tab, artefacts, engram, scripted_history

pytest.importorskip("playwright", reason="playwright is not installed (the test extra)")
# One served console and one browser for the module, on one worker.
pytestmark = pytest.mark.xdist_group("console-browser")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("console") / "data"
    data.mkdir()
    enabled = engram("admin", "tenant", "enable", "acme", "-d", str(data))
    assert enabled.returncode == 0, enabled.stderr
    # Reports the repository keeps: one collection's evaluation, one capacity run.
    reports = [ROOT / "eval" / "results" / "cranfield", ROOT / "eval" / "bench-results" / "capacity-100k-1m-v14"]
    server = Served(data, *(arg for path in reports for arg in ("--console-reports", str(path))))
    try:
        server.history = scripted_history(server.base + "/mcp")
        disputed = server.history.records[1]
        moved = engram("admin", "transition", "dispute", "acme", "ws1", disputed, "-d", str(data))
        assert moved.returncode == 0, moved.stderr
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def tab(chromium, served):
    """One logged-in browser tab for the module's page checks."""
    opened = Tab(chromium)
    opened.page.goto(served.link())
    assert opened.page.url == served.console + "/"
    yield opened
    opened.close()


def _cell(tab: Tab, selector: str) -> str:
    return tab.page.locator(selector).first.inner_text().strip()


def test_every_page_loads_without_a_console_error_and_is_kept_as_a_screenshot(tab, served, tmp_path_factory):
    shots = artefacts(tmp_path_factory)
    for name, path in PAGES.items():
        tab.page.goto(served.console + path)
        tab.page.wait_for_load_state("networkidle")
        assert tab.page.locator("h1").count() == 1, name
        tab.page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    assert tab.errors == []


def test_the_overview_counts_what_the_calls_did(tab, served):
    tab.page.goto(served.console + "/")
    # Four admitted: one disputed, one forgotten; one candidate left pending, one withdrawn.
    row = '#records-by-state tr[data-scope="acme/ws1"]'
    assert _cell(tab, f'{row} td[data-state="accepted_current"]') == "2"
    assert _cell(tab, f'{row} td[data-state="accepted_disputed"]') == "1"
    assert _cell(tab, f'{row} td[data-state="tombstoned"]') == "1"
    assert _cell(tab, "#expiring") == "1"
    assert _cell(tab, "#store-kind") == "sqlite"
    overview = tab.page.request.get(served.console + "/api/overview").json()
    assert overview["candidates_by_state"]["pending"] == 1
    assert overview["candidates_by_state"]["withdrawn"] == 1
    assert [e["record_id"] for e in overview["expiring"]] == [served.history.records[0]]
    assert int(_cell(tab, "#journal-head")) == overview["journal_head"] > 0


def test_the_scopes_page_shows_lag_against_the_journal_head_and_refreshes_it(tab, served):
    tab.page.goto(served.console + "/scopes")
    row = '#scopes-table tr[data-scope="acme/ws1"]'
    assert _cell(tab, f'{row} td[data-field="current"]') == "2"
    head = int(_cell(tab, f'{row} td[data-field="head"]'))
    assert _cell(tab, f'{row} td[data-field="lag-lexical"]') == f"{head} / 0"
    assert _cell(tab, f'{row} td[data-field="lag-semantic"]') == "off"  # served without a model
    # htmx replaces the live table without a reload: the fragment request is seen.
    with tab.page.expect_response(lambda r: r.url.endswith("/fragments/scopes"), timeout=10_000) as polled:
        pass
    assert polled.value.status == 200
    assert tab.page.locator("#scopes-table").count() == 1


def test_the_audit_page_filters_by_code_and_plots_the_errors(tab, served):
    tab.page.goto(served.console + "/audit?code=NOT_FOUND")
    assert _cell(tab, "#audit-matched") == "1"
    assert tab.page.locator("#audit-table tbody tr").count() == 1
    assert "engram_memory_get" in tab.page.inner_text("#audit-table tbody")
    plotted = tab.page.evaluate("Chart.getChart(document.getElementById('errors-chart')).data.datasets[0]")
    assert plotted["label"] == "NOT_FOUND" and sum(plotted["data"]) == 1
    tab.page.goto(served.console + "/audit?tool=engram_memory_capture")
    assert _cell(tab, "#audit-matched") == "6"
    assert tab.errors == []


def test_the_audit_form_filters_by_tenant_and_time(tab, served):
    tab.page.goto(served.console + "/audit")
    every = int(_cell(tab, "#audit-matched"))
    newest = _cell(tab, "#audit-table tbody td")
    assert every > 6 and tab.page.locator("#audit-older").count() == 0  # one page holds them all

    def filtered(**fields: str) -> list[str]:
        for name, value in fields.items():
            tab.page.fill(f"input[name={name}]", value)
        tab.page.click("form.filters button[type=submit]")
        shown = tab.page.locator("#audit-table tbody tr td:first-child").all_inner_texts()
        assert _cell(tab, "#audit-matched") == str(len(shown))
        return shown

    assert len(filtered(tenant="acme")) == every  # every scripted call was acme's
    assert filtered(tenant="nobody") == []
    since = filtered(tenant="", since=newest[:19])
    assert since[0] == newest and all(stamp >= newest[:19] for stamp in since)
    assert filtered(since="", until="2000") == []
    assert len(filtered(until="", code="NOT_FOUND")) == 1  # the code is typed, as a protocol error's is
    assert tab.errors == []


def test_the_reports_page_plots_the_eval_and_bench_reports(tab, served):
    tab.page.goto(served.console + "/reports")
    tab.page.wait_for_load_state("networkidle")
    assert tab.page.locator("section.report h2").first.inner_text().startswith("cranfield")
    drawn = tab.page.eval_on_selector_all("canvas[data-chart]", "cs => cs.filter(c => Chart.getChart(c)).length")
    assert drawn == tab.page.locator("canvas[data-chart]").count() >= 3
    assert tab.errors == []


def test_the_receipt_page_charts_a_pasted_receipt_and_replays_it(tab, served, tmp_path_factory):
    tab.page.goto(served.console + "/receipts")
    tab.page.fill("textarea[name=receipt]", json.dumps(served.history.search_output["rank_receipt"]))
    tab.page.fill("input[name=tenant]", "acme")
    tab.page.fill("input[name=workspace]", "ws1")
    tab.page.fill("textarea[name=arguments]", json.dumps(served.history.search_arguments))
    tab.page.click("form.receipt-form button[type=submit]")
    tab.page.wait_for_load_state("networkidle")
    returned = [p["record"]["record_id"] for p in served.history.search_output["records"]]
    assert tab.page.locator("#contributions-table tbody tr").count() == len(returned) > 0
    # The forget since the search changed the journal: the replay says so.
    assert "no" in tab.page.inner_text("#replay")
    tab.page.screenshot(path=str(artefacts(tmp_path_factory) / "receipt-replayed.png"), full_page=True)
    assert tab.errors == []


def test_a_recent_search_picked_from_the_audit_shows_its_receipt_and_replay(tab, served, tmp_path_factory):
    tab.page.goto(served.console + "/receipts")
    receipt = served.history.search_output["rank_receipt"]
    row = tab.page.locator(f'#recent-searches tr[data-receipt="{receipt["receipt_digest"]}"]')
    assert row.count() == 1  # the scripted search, named by its audit line
    assert "acme/ws1" in row.inner_text()
    with tab.page.expect_response(lambda r: r.url.endswith("/receipts/recent")) as picked:
        row.locator("form.pick-search button[type=submit]").click()
    tab.page.wait_for_load_state("networkidle")
    assert picked.value.status == 200
    shown = tab.page.locator("#contributions-table tbody tr td:first-child").all_inner_texts()
    assert shown == [c["record_id"] for c in receipt["contributions"]] != []
    charted = tab.page.evaluate("Chart.getChart(document.getElementById('contributions-chart')).data.labels")
    assert len(charted) == len(shown)
    assert receipt["ordered_ids_digest"] in tab.page.inner_text("#receipt-facts")
    # Replayed with the search's own arguments (kept by the server, never shown): the
    # forget since then changed the journal, and the replay says so.
    assert _cell(tab, "#replay-match") == "no"
    assert "no (now" in tab.page.inner_text("#replay")
    tab.page.screenshot(path=str(artefacts(tmp_path_factory) / "receipt-picked.png"), full_page=True)
    assert _leaks(served, {"picked": picked.value.body()}) == []
    assert tab.errors == []


def test_a_search_whose_receipt_is_no_longer_kept_is_answered_as_such(tab, served):
    tab.page.goto(served.console + "/receipts")
    token = tab.page.get_attribute("input[name=csrf_token]", "value")
    jar = {"engram_console": tab.context.cookies()[0]["value"]}
    form = {"receipt_digest": "sha256:" + "0" * 64, "csrf_token": token}
    answer = httpx.post(served.console + "/receipts/recent", data=form, cookies=jar)
    assert answer.status_code == 404
    assert "no longer kept" in answer.text


def test_a_link_works_once_and_a_spent_one_says_how_to_get_another(chromium, served):
    link = served.link()
    first, second = Tab(chromium), Tab(chromium)
    try:
        first.page.goto(link)
        assert first.page.url == served.console + "/"
        first.page.click("form.logout button")  # a POST carrying the CSRF token
        first.page.wait_for_url(served.console + "/login-ended")
        assert first.page.goto(served.console + "/").status == 401
        answer = second.page.goto(link)
        assert answer is not None and answer.status == 403
        assert "engram admin console-link" in second.page.inner_text("main")
        assert second.context.cookies() == []
        assert second.page.goto(served.console + "/").status == 401
    finally:
        first.close()
        second.close()


def test_the_session_cookie_carries_its_flags(tab, served):
    (cookie,) = tab.context.cookies()
    assert cookie["name"] == "engram_console"
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["secure"] is False  # plain HTTP on loopback; Secure under TLS (test_console_access)
    assert cookie["expires"] > 0  # a persistent cookie with an expiry, not an endless session
    assert tab.page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it


def test_a_post_without_the_csrf_token_is_refused(tab, served):
    cookie = tab.context.cookies()[0]["value"]
    jar = {"engram_console": cookie}
    receipt = json.dumps(served.history.search_output["rank_receipt"])
    refused = httpx.post(served.console + "/receipts", data={"receipt": receipt}, cookies=jar)
    assert refused.status_code == 403
    wrong = httpx.post(served.console + "/logout", headers={"X-CSRF-Token": "x" * 43}, cookies=jar)
    assert wrong.status_code == 403
    token = tab.page.get_attribute("input[name=csrf_token]", "value")
    accepted = httpx.post(served.console + "/receipts", data={"receipt": receipt, "csrf_token": token}, cookies=jar)
    assert accepted.status_code == 200


def test_the_console_cookie_opens_nothing_on_mcp_and_the_console_serves_no_mcp(tab, served):
    cookie = tab.context.cookies()[0]["value"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    on_mcp = httpx.post(served.base + "/mcp", json=body, headers=headers, cookies={"engram_console": cookie})
    assert "engram_memory" not in on_mcp.text  # no tool is listed without the host's signed context
    on_console = httpx.post(served.console + "/mcp", json=body, headers=headers, cookies={"engram_console": cookie})
    assert on_console.status_code in (404, 405)


def test_every_answer_holds_no_record_text_and_no_query(tab, served):
    for path in [*PAGES.values(), "/fragments/scopes", "/fragments/replicas"]:
        tab.page.goto(served.console + path)
    bodies = dict(tab.bodies)
    for path in API:
        answer = tab.page.request.get(served.console + path)
        assert answer.status == 200, path
        bodies[path] = answer.body()
    assert _leaks(served, bodies) == []
    assert len(bodies) >= len(PAGES) + len(API)


def _leaks(served, bodies: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """Each (answer, text) where a record's text, its marker or the query appears."""
    needles = [text.encode() for text in served.history.texts]
    needles += [text.split("marker ")[1].rstrip(".").encode() for text in served.history.texts]
    needles.append(served.history.search_arguments["query"].encode())
    return [(url, needle) for url, body in bodies.items() for needle in needles if needle in body]


def test_a_page_of_another_host_name_is_refused(served):
    """DNS rebinding: a site whose name resolves to 127.0.0.1 names itself in Host."""
    assert httpx.get(served.console + "/", headers={"Host": "attacker.example"}).status_code == 400
    assert httpx.get(f"http://localhost:{served.console_port}/").status_code == 401  # the login help


def test_the_pages_forbid_inline_script_and_framing(served):
    answer = httpx.get(served.console + "/")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy
    assert "frame-ancestors 'none'" in policy
    assert answer.status_code == 401  # no session: the login help, not the overview
    for asset in ("/static/vendor/htmx/htmx.min.js", "/static/vendor/chartjs/chart.umd.min.js"):
        assert httpx.get(served.console + asset).status_code == 200
    vendored = Path(__file__).resolve().parents[2] / "service" / "console" / "static" / "vendor"
    assert (vendored / "htmx" / "LICENSE").is_file() and (vendored / "chartjs" / "LICENSE.md").is_file()
