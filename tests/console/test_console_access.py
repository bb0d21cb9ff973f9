"""Who may use the console, without a browser: one-time links, session expiry, the
CSRF check, the cookie's Secure flag under TLS, and the binds `engram serve` refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from engram.service.cli import app as cli
from engram.service.console.access import ConsoleAccess, LinkState, csrf_matches
from engram.service.console.app import ConsoleConfig, create_console
from engram.service.console.listener import LINK_COMMAND, ConsoleListener, refusal
from engram.service.settings import Settings

runner = CliRunner()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_link_works_once():
    access = ConsoleAccess(link_ttl_s=60, session_s=600)
    token, _ = access.mint_link()
    first = access.exchange(token)
    assert first.state is LinkState.ACCEPTED and access.session(first.cookie) == first.session
    assert access.exchange(token).state is LinkState.UNKNOWN
    assert access.exchange("never-minted").state is LinkState.UNKNOWN


def test_an_expired_link_and_an_expired_session_are_refused():
    clock = Clock()
    access = ConsoleAccess(link_ttl_s=60, session_s=600, clock=clock)
    late, _ = access.mint_link()
    token, _ = access.mint_link()
    login = access.exchange(token)
    clock.now += 61
    assert access.exchange(late).state is LinkState.EXPIRED
    assert access.session(login.cookie) is not None
    clock.now += 600
    assert access.session(login.cookie) is None


def test_logging_out_ends_the_session_and_csrf_needs_its_own_token():
    access = ConsoleAccess(link_ttl_s=60, session_s=600)
    one = access.exchange(access.mint_link()[0])
    other = access.exchange(access.mint_link()[0])
    assert one.session is not None and other.session is not None
    assert csrf_matches(one.session, one.session.csrf_token)
    assert not csrf_matches(one.session, other.session.csrf_token)
    assert not csrf_matches(one.session, None)
    access.end(one.cookie)
    assert access.session(one.cookie) is None and access.session(other.cookie) is not None


@pytest.mark.parametrize("secure", [True, False])
def test_the_cookie_is_secure_under_tls(tmp_path, secure):
    from engram.service.engine import Engine

    engine = Engine.open(tmp_path / "data", load_model=False)
    try:
        access = ConsoleAccess(link_ttl_s=60, session_s=600)
        config = ConsoleConfig(tmp_path / "audit.jsonl", [], secure_cookie=secure, started_at=0.0)
        client = TestClient(create_console(engine, access, config), base_url="https://127.0.0.1")
        answer = client.get(f"/login/{access.mint_link()[0]}", follow_redirects=False)
        assert answer.status_code == 303
        flags = [part.strip().lower() for part in answer.headers["set-cookie"].split(";")]
        assert ("secure" in flags) is secure
        assert "httponly" in flags and "samesite=strict" in flags and any(f.startswith("max-age=") for f in flags)
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ({}, False),
        ({"console_host": "0.0.0.0"}, True),
        ({"console_host": "0.0.0.0", "console_remote": True}, True),
        ({"console_host": "0.0.0.0", "console_tls_cert": "c.pem", "console_tls_key": "k.pem"}, True),
        (
            {
                "console_host": "0.0.0.0",
                "console_tls_cert": "c.pem",
                "console_tls_key": "k.pem",
                "console_remote": True,
            },
            False,
        ),
        ({"console_tls_cert": "c.pem"}, True),
        ({"workers": 2, "database_url": "postgresql://x/y"}, True),
    ],
)
def test_which_binds_are_refused(tmp_path, overrides, refused):
    settings = Settings(data_dir=tmp_path, console_port=9000, **overrides)
    assert (refusal(settings) is not None) is refused
    assert refusal(Settings(data_dir=tmp_path, console_host="0.0.0.0")) is None  # no console asked for


def test_serve_refuses_a_console_beyond_loopback_without_tls(tmp_path):
    result = runner.invoke(
        cli, ["serve", "-d", str(tmp_path / "data"), "--no-model", "--console-port", "9", "--console-host", "0.0.0.0"]
    )
    assert result.exit_code == 2
    assert "in clear" in result.output and "--console-remote" in result.output
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_a_console_link_needs_a_live_server(tmp_path):
    result = runner.invoke(cli, ["admin", "console-link", "-d", str(tmp_path)])
    assert result.exit_code == 1
    assert "engram serve --console-port" in result.output


def _self_signed(folder: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_the_listener_serves_tls_and_its_links_log_in_with_a_secure_cookie(tmp_path):
    import httpx

    from engram.service.engine import Engine

    cert, key = _self_signed(tmp_path)
    settings = Settings(data_dir=tmp_path / "data", console_port=0, console_tls_cert=cert, console_tls_key=key)
    assert refusal(settings) is None
    engine = Engine.open(settings.data_dir, load_model=False)
    config = ConsoleConfig(tmp_path / "audit.jsonl", [], secure_cookie=True, started_at=0.0)
    listener = ConsoleListener(engine, settings, config).start()
    try:
        link = listener.commands()[LINK_COMMAND]({})["url"]
        assert link.startswith(f"https://127.0.0.1:{listener.port}/login/")
        with httpx.Client(verify=False) as client:
            answer = client.get(link, follow_redirects=False)
            assert answer.status_code == 303 and "secure" in answer.headers["set-cookie"].lower()
            assert client.get(link).status_code == 403  # spent
            with pytest.raises(httpx.TransportError):
                httpx.get(link.replace("https://", "http://"))  # no plain HTTP on a TLS console
    finally:
        listener.stop()
        engine.close()
