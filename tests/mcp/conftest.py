from __future__ import annotations

import pytest
from mcp_support import SECRET, FakeEngine, ServerThread  # noqa: E402

from engram.service.http.app import create_app  # noqa: E402
from engram.service.settings import Settings  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="session")
def fake_server(fake_engine: FakeEngine, tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("fake-data")
    app = create_app(fake_engine, Settings(data_dir=data_dir, rate=1.0, burst=8), host_secret=SECRET)
    with ServerThread(app) as running:
        running.data_dir = data_dir
        yield running


@pytest.fixture
def fake(fake_server, fake_engine: FakeEngine):
    fake_engine.reset()
    yield fake_server
    fake_engine.reset()
