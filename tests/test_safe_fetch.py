"""Tests for safe_fetch against a real HTTPS server on 127.0.0.1 (no mocks).

Only loopback is ever contacted: every non-loopback address in these tests is
either refused syntactically or comes from an injected resolver and is
refused before any connection.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable

import pytest

import safe_fetch
from safe_fetch import (
    FetchError,
    UnsafeURL,
    check_resolves_public,
    download_audio,
    fetch,
    is_public_ip,
    redact_url,
    sniff_audio,
    validate_url,
)
from tests.support.https_server import (  # the fixtures come from conftest's pytest_plugins
    FailThenSucceed,
    HTTPSTestServer,
    TestRequest,
    TestResponse,
    big_body,
    drip,
    hang,
    redirect,
    static,
)

MP3_ID3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\x00" * 100
MP3_SYNC = b"\xff\xfb\x90\x64" + b"\x00" * 100
WAV = b"RIFF\x24\x08\x00\x00WAVEfmt " + b"\x00" * 100
HTML = b"<!doctype html><html><body>login</body></html>"


def get(srv: HTTPSTestServer, path: str = "/ok", **kw: object) -> safe_fetch.FetchResult:
    kw.setdefault("max_bytes", 1 << 20)
    kw.setdefault("timeout", 5.0)
    kw.setdefault("allow_loopback", True)
    kw.setdefault("ca_certs", srv.ca_path)
    return fetch("GET", srv.url(path), **kw)  # type: ignore[arg-type]


def static_resolver(mapping: dict[str, list[str]]) -> Callable[[str, int], list[str]]:
    def resolve(host: str, port: int) -> list[str]:
        if host not in mapping:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return mapping[host]

    return resolve


# ----------------------------------------------------------- validate_url

# {p} is replaced by the test server's port, so that any of these that were
# wrongly accepted would actually reach the local server and be counted.
HOSTILE_URLS = [
    "http://127.0.0.1:{p}/ok",
    "https://127.0.0.1:{p}/ok",  # IP literal (allowed only with allow_loopback)
    "https://2130706433:{p}/ok",  # decimal
    "https://0177.0.0.1:{p}/ok",  # octal
    "https://017700000001:{p}/ok",  # octal, single number
    "https://0x7f.1:{p}/ok",  # hex, short form
    "https://0x7f000001:{p}/ok",  # hex, single number
    "https://0x7f.0x0.0x0.0x1:{p}/ok",
    "https://127.1:{p}/ok",  # short form
    "https://127.0.1:{p}/ok",
    "https://127.000.000.001:{p}/ok",
    "https://127.0.0.1.:{p}/ok",  # trailing dot
    "https://0.0.0.0:{p}/ok",
    "https://0:{p}/ok",
    "https://[::1]:{p}/ok",
    "https://[::]:{p}/ok",
    "https://[::ffff:127.0.0.1]:{p}/ok",  # IPv4-mapped
    "https://[0:0:0:0:0:ffff:7f00:1]:{p}/ok",
    "https://[::127.0.0.1]:{p}/ok",  # IPv4-compatible
    "https://[fe80::1%25lo]:{p}/ok",  # zone id
    "https://%31%32%37.0.0.1:{p}/ok",  # percent-encoded
    "https://127%2e0%2e0%2e1:{p}/ok",
    "https://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{p}/ok",  # full-width digits
    "https://127\u30020\u30020\u30021:{p}/ok",  # ideographic full stops
    "https://localhost:{p}/ok",
    "https://localhost.:{p}/ok",
    "https://LOCALHOST:{p}/ok",
    "https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:{p}/ok",  # full-width localhost
    "https://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3:{p}/ok",  # circled localhost
    "https://audio.localhost:{p}/ok",
    "https://localhost.localdomain:{p}/ok",
    "https://example.com@127.0.0.1:{p}/ok",  # userinfo
    "https://user:pass@example.com/ok",
    "https://127.0.0.1:{p}\\@example.com/ok",  # backslash parser confusion
    "https://printer.local/ok",
    "https://metadata.google.internal/computeMetadata/v1/",
    "https://router.home.arpa/ok",
    "https://1.0.0.127.in-addr.arpa/ok",
    "https://nas.lan/ok",
    "https://intranet/ok",  # single label
    "https://169.254.169.254/latest/meta-data/",
    "https://10.0.0.1/ok",
    "https://192.168.1.1/ok",
    "https://example.com:22/ok",  # privileged port
    "https://example.com:0/ok",
    "https://example.com:99999/ok",
    "https://example.com:+443/ok",
    "https://example.com:0x1bb/ok",
    "ftp://example.com/ok",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "javascript:alert(1)",
    "//example.com/ok",
    "https:/example.com/ok",
    "https:///example.com/ok",
    "https://",
    "",
    "https://exa mple.com/ok",
    " https://example.com/ok",
    "https://example.com/ok\r\nHost: evil",
    "https://example..com/ok",
    "https://-example.com/ok",
    "https://example.com_/ok",
    "https://xn--/ok",
    "https://ex[ample.com/ok",
    "https://[::1/ok",
    "https://exa\u200bmple.com/ok",  # zero-width space
    "https://example\uff0ecom\uff0f@127.0.0.1:{p}/ok",  # full-width dot and slash
    "https://" + "a" * 64 + ".com/ok",
    "https://example.com/" + "a" * 5000,
]


def test_enough_hostile_urls() -> None:
    assert len(HOSTILE_URLS) >= 30


@pytest.mark.parametrize("template", HOSTILE_URLS)
def test_validate_url_rejects(template: str) -> None:
    with pytest.raises(UnsafeURL):
        validate_url(template.format(p=8443))


# Must stay refused even with the test-only loopback setting.
LOOPBACK_STILL_REFUSED = [
    u
    for u in HOSTILE_URLS
    if "localhost" not in u.lower() and "\uff4c" not in u and "\u24db" not in u and u != "https://127.0.0.1:{p}/ok"
]


@pytest.mark.parametrize("template", LOOPBACK_STILL_REFUSED)
def test_validate_url_rejects_even_with_allow_loopback(template: str) -> None:
    with pytest.raises(UnsafeURL):
        validate_url(template.format(p=8443), allow_loopback=True)


def test_hostile_urls_never_connect(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(MP3_ID3, "audio/mpeg"))
    for template in HOSTILE_URLS:
        url = template.format(p=https_server.port)
        with pytest.raises(UnsafeURL):
            fetch("GET", url, max_bytes=1000, timeout=2, ca_certs=https_server.ca_path)
    for template in LOOPBACK_STILL_REFUSED:
        url = template.format(p=https_server.port)
        with pytest.raises(UnsafeURL):
            fetch("GET", url, max_bytes=1000, timeout=2, allow_loopback=True, ca_certs=https_server.ca_path)
    assert https_server.connections == 0
    # The counter works: the one allowed test form does connect.
    assert get(https_server).content == MP3_ID3
    assert https_server.connections == 1


@pytest.mark.parametrize(
    "url, expected",
    [
        ("https://Example.COM/a", "https://example.com/a"),
        ("HTTPS://example.com", "https://example.com/"),
        ("https://example.com./x", "https://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("https://example.com:/x", "https://example.com/x"),
        ("https://files.example.com:8443/r.mp3?sig=a%2Fb&x=1", "https://files.example.com:8443/r.mp3?sig=a%2Fb&x=1"),
        ("https://example.com/r.mp3#frag", "https://example.com/r.mp3"),
        ("https://b\u00fccher.example.com/\u00e9.mp3", "https://xn--bcher-kva.example.com/%C3%A9.mp3"),
        ("https://1.2.3.4.nip.io/x", "https://1.2.3.4.nip.io/x"),  # a name; DNS decides
    ],
)
def test_validate_url_normalizes(url: str, expected: str) -> None:
    assert validate_url(url) == expected


def test_validate_url_allow_loopback_forms() -> None:
    assert validate_url("https://127.0.0.1:8443/x", allow_loopback=True) == "https://127.0.0.1:8443/x"
    assert validate_url("https://localhost:8443/x", allow_loopback=True) == "https://localhost:8443/x"
    assert validate_url("https://a.localhost:8443/x", allow_loopback=True) == "https://a.localhost:8443/x"
    for url in ("https://127.1:8443/", "https://[::1]:8443/", "https://10.0.0.1/", "https://host.local/"):
        with pytest.raises(UnsafeURL):
            validate_url(url, allow_loopback=True)


def test_unsafe_url_message_has_no_query() -> None:
    with pytest.raises(UnsafeURL) as info:
        validate_url("http://example.com/x?token=SECRET")
    assert "SECRET" not in str(info.value)
    assert info.value.transient is False


# -------------------------------------------------- check_resolves_public

NON_PUBLIC = [
    "127.0.0.1",
    "127.8.9.10",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "100.127.255.254",
    "0.0.0.0",
    "0.1.2.3",
    "192.0.0.8",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fe80::1%eth0",
    "fec0::1",
    "fc00::1",
    "fd12:3456::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:8.8.8.8",  # mapped forms are refused outright
    "::127.0.0.1",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b:1::1",
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
    "2001::1",  # Teredo
    "2001:db8::1",
    "3fff::1",
    "100::1",
    "not-an-ip",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2a00:1450:4001:80b::200e", "64:ff9b::808:808", "2002:808:808::1"]


@pytest.mark.parametrize("addr", NON_PUBLIC)
def test_non_public_addresses_refused(addr: str) -> None:
    assert not is_public_ip(addr)
    with pytest.raises(UnsafeURL):
        check_resolves_public("files.example.com", 443, resolver=static_resolver({"files.example.com": [addr]}))


@pytest.mark.parametrize("addr", PUBLIC)
def test_public_addresses_accepted(addr: str) -> None:
    assert is_public_ip(addr)
    resolver = static_resolver({"files.example.com": [addr]})
    assert check_resolves_public("files.example.com", 443, resolver=resolver) == [addr]


def test_one_private_address_among_public_ones_refuses() -> None:
    resolver = static_resolver({"files.example.com": ["8.8.8.8", "2a00:1450:4001:80b::200e", "10.0.0.1"]})
    with pytest.raises(UnsafeURL):
        check_resolves_public("files.example.com", 443, resolver=resolver)


def test_allow_loopback_admits_loopback_only() -> None:
    resolver = static_resolver({"localhost": ["127.0.0.1", "::1"], "evil.localhost": ["127.0.0.1", "192.168.0.1"]})
    assert check_resolves_public("localhost", 443, allow_loopback=True, resolver=resolver) == ["127.0.0.1", "::1"]
    with pytest.raises(UnsafeURL):
        check_resolves_public("localhost", 443, resolver=resolver)
    with pytest.raises(UnsafeURL):
        check_resolves_public("evil.localhost", 443, allow_loopback=True, resolver=resolver)
    for addr in ("10.0.0.1", "172.16.0.1", "169.254.169.254", "::ffff:127.0.0.1", "fd00::1"):
        assert not is_public_ip(addr, allow_loopback=True)


def test_real_resolver_localhost_is_refused() -> None:
    """The real getaddrinfo path: 'localhost' resolves to loopback here."""
    with pytest.raises(UnsafeURL):
        check_resolves_public("localhost", 443)


def test_resolution_failures() -> None:
    with pytest.raises(FetchError) as info:
        check_resolves_public("nx.example.com", 443, resolver=static_resolver({}))
    assert info.value.transient is False

    def again(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    with pytest.raises(FetchError) as info:
        check_resolves_public("files.example.com", 443, resolver=again)
    assert info.value.transient is True
    with pytest.raises(FetchError):
        check_resolves_public("files.example.com", 443, resolver=static_resolver({"files.example.com": []}))


def test_slow_resolver_counts_against_deadline() -> None:
    release = threading.Event()

    def slow(host: str, port: int) -> list[str]:
        release.wait(10)
        return ["8.8.8.8"]

    start = time.monotonic()
    try:
        with pytest.raises(FetchError) as info:
            fetch("GET", "https://files.example.com/x", max_bytes=10, timeout=0.3, resolver=slow)
    finally:
        release.set()
    assert info.value.transient is True
    assert time.monotonic() - start < 3


# ------------------------------------------------------ DNS pinning / TOCTOU


def test_name_resolving_to_loopback_is_refused_without_connecting(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(MP3_ID3, "audio/mpeg"))
    resolver = static_resolver({"files.example.com": ["127.0.0.1"]})
    url = f"https://files.example.com:{https_server.port}/ok"
    with pytest.raises(UnsafeURL):
        fetch("GET", url, max_bytes=1000, timeout=2, resolver=resolver, ca_certs=https_server.ca_path)
    assert https_server.connections == 0


def test_connects_to_checked_address_without_second_lookup(https_ca: object) -> None:
    """A rebinding resolver answers loopback once and then something else.

    The fetch succeeds, so the connection used the first (checked) answer;
    the resolver saw exactly one call.  The certificate is checked against
    the name, not the IP.
    """
    calls: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        if len(calls) > 1:
            return ["10.0.0.1"]  # would be refused; must never be asked
        return ["127.0.0.1"]

    with HTTPSTestServer(ca=https_ca, cert_hostnames=("audio.localhost",)) as srv:  # type: ignore[arg-type]
        srv.route("/a.mp3", static(MP3_ID3, "audio/mpeg"))
        result = fetch(
            "GET",
            f"https://audio.localhost:{srv.port}/a.mp3",
            max_bytes=1000,
            timeout=5,
            allow_loopback=True,
            resolver=rebinding,
            ca_certs=srv.ca_path,
        )
        assert result.content == MP3_ID3
        assert calls == ["audio.localhost"]
        assert srv.requests[0].headers["host"] == f"audio.localhost:{srv.port}"


def test_env_proxies_are_ignored(https_server: HTTPSTestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    https_server.route("/ok", static(b"hello", "text/plain"))
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # discard port: would fail if used
    assert get(https_server).content == b"hello"


# --------------------------------------------------------------- redirects


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{p}/ok",
        "https://10.0.0.1/ok",
        "https://[::1]:{p}/ok",
        "https://2130706433:{p}/ok",
        "https://127.1:{p}/ok",
        "https://user:pw@127.0.0.1:{p}/ok",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://169.254.169.254/latest/meta-data/",
        "ftp://127.0.0.1/ok",
        "//10.0.0.1/ok",  # scheme-relative
    ],
)
def test_redirect_to_forbidden_target_refused(https_server: HTTPSTestServer, target: str) -> None:
    https_server.route("/ok", static(MP3_ID3, "audio/mpeg"))
    https_server.route("/r", redirect(target.format(p=https_server.port)))
    with pytest.raises(UnsafeURL) as info:
        get(https_server, "/r")
    assert "redirect" in str(info.value)
    assert https_server.request_count("/ok") == 0
    assert https_server.connections == 1


def test_redirect_relative_and_303(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(b"done", "text/plain"))
    https_server.route("/rel", redirect("/hop"))
    https_server.route("/hop", redirect("ok", status=307))
    https_server.route("/post", redirect("/ok", status=303), methods=("POST",))
    result = get(https_server, "/rel")
    assert result.content == b"done"
    assert result.final_url == https_server.url("/ok")
    assert len(result.redirects) == 2
    result = fetch(
        "POST",
        https_server.url("/post"),
        body=b"{}",
        max_bytes=100,
        timeout=5,
        allow_loopback=True,
        ca_certs=https_server.ca_path,
    )
    assert result.content == b"done"
    assert [r.method for r in https_server.requests][-2:] == ["POST", "GET"]


def test_too_many_redirects(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(b"done", "text/plain"))
    for i in range(4):
        https_server.route(f"/r{i}", redirect(f"/r{i + 1}" if i < 3 else "/ok"))
    https_server.route("/loop", redirect("/loop", status=301))
    assert get(https_server, "/r1").content == b"done"  # exactly 3 redirects
    with pytest.raises(FetchError) as info:
        get(https_server, "/r0")  # 4 redirects
    assert info.value.transient is False
    assert "too many redirects" in str(info.value)
    with pytest.raises(FetchError):
        get(https_server, "/loop")
    assert https_server.request_count("/loop") == 4
    with pytest.raises(FetchError):
        get(https_server, "/r3", max_redirects=0)


def test_cross_origin_redirect_drops_credentials(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(b"done", "text/plain"))
    https_server.route("/same", redirect("/ok"))
    https_server.route("/cross", redirect(f"https://localhost:{https_server.port}/ok"))
    resolver = static_resolver({"localhost": ["127.0.0.1"]})
    auth = {"Authorization": "Bearer SECRET", "X-Trace": "1"}
    get(https_server, "/same", headers=auth)
    assert https_server.requests[-1].headers.get("authorization") == "Bearer SECRET"
    get(https_server, "/cross", headers=auth, resolver=resolver)
    last = https_server.requests[-1]
    assert last.headers["host"] == f"localhost:{https_server.port}"
    assert "authorization" not in last.headers
    assert last.headers["x-trace"] == "1"


def test_redirect_without_location(https_server: HTTPSTestServer) -> None:
    https_server.route("/r", lambda req: TestResponse(status=302))
    with pytest.raises(FetchError) as info:
        get(https_server, "/r")
    assert info.value.status == 302 and info.value.transient is False


# ------------------------------------------------------------------ size


class CountingSink(io.RawIOBase):
    def __init__(self) -> None:
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.written += len(b)
        return len(b)


BIG = 64 * 1024 * 1024


def test_oversize_with_content_length_aborts_before_body(https_server: HTTPSTestServer) -> None:
    https_server.route("/big", big_body(BIG))
    sink = CountingSink()
    with pytest.raises(FetchError) as info:
        get(https_server, "/big", max_bytes=100_000, dest=sink)
    assert info.value.transient is False
    assert "too large" in str(info.value)
    assert sink.written == 0


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "close-delimited"])
def test_oversize_without_content_length_aborts_early(https_server: HTTPSTestServer, chunked: bool) -> None:
    https_server.route("/big", big_body(BIG, with_length=False, chunked=chunked))
    sink = CountingSink()
    with pytest.raises(FetchError) as info:
        get(https_server, "/big", max_bytes=100_000, dest=sink)
    assert info.value.transient is False
    assert sink.written <= 100_000
    https_server.stop()  # server-side writer unblocks on the closed socket
    assert https_server.bytes_sent("/big") < BIG // 4


def test_max_bytes_boundary(https_server: HTTPSTestServer) -> None:
    https_server.route("/exact", big_body(1000, with_length=False, chunked=True))
    assert len(get(https_server, "/exact", max_bytes=1000).content or b"") == 1000
    with pytest.raises(FetchError):
        get(https_server, "/exact", max_bytes=999)


# -------------------------------------------------------------- deadline


def test_server_that_never_answers_hits_deadline(https_server: HTTPSTestServer) -> None:
    https_server.route("/hang", hang())
    start = time.monotonic()
    with pytest.raises(FetchError) as info:
        get(https_server, "/hang", timeout=0.5)
    elapsed = time.monotonic() - start
    assert info.value.transient is True
    assert 0.4 <= elapsed < 3


def test_dripping_server_hits_total_deadline(https_server: HTTPSTestServer) -> None:
    """One byte every 50 ms never trips a per-read timeout; the total deadline must."""
    https_server.route("/drip", drip(b"x", interval=0.05))
    start = time.monotonic()
    with pytest.raises(FetchError) as info:
        get(https_server, "/drip", timeout=0.8)
    elapsed = time.monotonic() - start
    assert info.value.transient is True
    assert "time limit" in str(info.value)
    assert 0.7 <= elapsed < 3


def test_tls_handshake_stall_hits_deadline() -> None:
    """A TCP listener that never speaks TLS: the handshake is bounded too."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        start = time.monotonic()
        with pytest.raises(FetchError) as info:
            fetch("GET", f"https://127.0.0.1:{port}/", max_bytes=10, timeout=0.5, allow_loopback=True)
        assert info.value.transient is True
        assert time.monotonic() - start < 3
    finally:
        listener.close()


def test_connection_refused_is_transient() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(FetchError) as info:
        fetch("GET", f"https://127.0.0.1:{port}/", max_bytes=10, timeout=2, allow_loopback=True)
    assert info.value.transient is True


# ------------------------------------------------------------------- TLS


def test_wrong_certificate_hostname_refused(https_ca: object) -> None:
    with HTTPSTestServer(ca=https_ca, cert_hostnames=("wrong.example.com",)) as srv:  # type: ignore[arg-type]
        srv.route("/ok", static(b"x", "text/plain"))
        with pytest.raises(FetchError) as info:
            get(srv)
        assert info.value.transient is False
        assert "certificate" in str(info.value)
        assert srv.request_count() == 0


def test_untrusted_ca_refused(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(b"x", "text/plain"))
    with pytest.raises(FetchError) as info:
        fetch("GET", https_server.url("/ok"), max_bytes=10, timeout=5, allow_loopback=True)
    assert info.value.transient is False
    assert https_server.request_count() == 0


def test_ssl_context_parameter(https_server: HTTPSTestServer) -> None:
    https_server.route("/ok", static(b"x", "text/plain"))
    ctx = https_server.client_context()
    assert get(https_server, ca_certs=None, ssl_context=ctx).content == b"x"
    lax = ssl.create_default_context(cafile=https_server.ca_path)
    lax.check_hostname = False
    with pytest.raises(ValueError):
        get(https_server, ca_certs=None, ssl_context=lax)


# ---------------------------------------------------------------- status


@pytest.mark.parametrize(
    "status, transient", [(500, True), (502, True), (503, True), (429, True), (404, False), (403, False), (410, False)]
)
def test_status_classification(https_server: HTTPSTestServer, status: int, transient: bool) -> None:
    https_server.route("/s", static(b"nope", "text/plain", status=status))
    with pytest.raises(FetchError) as info:
        get(https_server, "/s?sig=SECRET")
    assert info.value.status == status
    assert info.value.transient is transient
    assert "SECRET" not in str(info.value)


def test_raise_for_status_false_returns_answer(https_server: HTTPSTestServer) -> None:
    https_server.route("/s", static(b'{"error":"gone"}', "application/json", status=404))
    result = get(https_server, "/s", raise_for_status=False)
    assert result.status == 404 and result.content == b'{"error":"gone"}'
    assert result.headers["content-type"] == "application/json"


def test_fail_then_succeed(https_server: HTTPSTestServer) -> None:
    https_server.route("/flaky", FailThenSucceed(2, static(b"ok", "text/plain")))
    for _ in range(2):
        with pytest.raises(FetchError) as info:
            get(https_server, "/flaky")
        assert info.value.transient is True and info.value.status == 503
    assert get(https_server, "/flaky").content == b"ok"
    assert https_server.request_count("/flaky") == 3


def test_post_json_body(https_server: HTTPSTestServer) -> None:
    def token(req: TestRequest) -> TestResponse:
        assert req.json() == {"username": "u"}
        return TestResponse(headers={"Content-Type": "application/json"}, body=b'{"token":"t"}')

    https_server.route("/api/token", token, methods=("POST",))
    result = fetch(
        "POST",
        https_server.url("/api/token"),
        headers={"Content-Type": "application/json"},
        body=b'{"username": "u"}',
        max_bytes=1000,
        timeout=5,
        allow_loopback=True,
        ca_certs=https_server.ca_path,
        allowed_content_types={"application/json"},
    )
    assert result.content == b'{"token":"t"}' and result.content_type == "application/json"


# ---------------------------------------------------------- content types


def test_sniff_audio() -> None:
    assert sniff_audio(MP3_ID3) == "mp3"
    assert sniff_audio(MP3_SYNC) == "mp3"
    assert sniff_audio(WAV) == "wav"
    assert sniff_audio(HTML) is None
    assert sniff_audio(b"") is None
    assert sniff_audio(b"RIFF\x00\x00\x00\x00AVI ") is None
    assert sniff_audio(b"\xff\xe0") is None  # sync bits but reserved version/layer


@pytest.mark.parametrize(
    "ctype, body, fmt",
    [
        ("audio/mpeg", MP3_ID3, "mp3"),
        ("audio/mp3", MP3_SYNC, "mp3"),
        ("audio/wav", WAV, "wav"),
        ("audio/x-wav", WAV, "wav"),
        ("audio/wave", WAV, "wav"),
        ("Audio/MPEG; charset=binary", MP3_ID3, "mp3"),
        ("application/octet-stream", MP3_ID3, "mp3"),
        ("application/octet-stream", MP3_SYNC, "mp3"),
        ("application/octet-stream", WAV, "wav"),
    ],
)
def test_download_audio_accepts(
    https_server: HTTPSTestServer, tmp_path: object, ctype: str, body: bytes, fmt: str
) -> None:
    https_server.route("/r", static(body, ctype))
    dest = os.path.join(str(tmp_path), "rec.bin")
    result = download_audio(
        https_server.url("/r"), dest, max_bytes=10_000, timeout=5, allow_loopback=True, ca_certs=https_server.ca_path
    )
    assert result.format == fmt and result.bytes_written == len(body)
    with open(dest, "rb") as fh:
        assert fh.read() == body
    assert os.listdir(str(tmp_path)) == ["rec.bin"]


@pytest.mark.parametrize(
    "ctype, body",
    [
        ("text/html", HTML),
        ("text/html", MP3_ID3),  # right bytes, wrong declared type
        ("application/json", b"{}"),
        ("application/octet-stream", HTML),  # octet-stream needs audio magic
        ("application/octet-stream", b"\x00" * 100),
        ("audio/mpeg", HTML),  # declared audio but not audio: always sniffed
        ("audio/mpeg", b""),
        ("video/mp4", MP3_ID3),
    ],
)
def test_download_audio_refuses_non_audio(
    https_server: HTTPSTestServer, tmp_path: object, ctype: str, body: bytes
) -> None:
    https_server.route("/r", static(body, ctype))
    dest = os.path.join(str(tmp_path), "rec.bin")
    with pytest.raises(FetchError) as info:
        download_audio(
            https_server.url("/r"),
            dest,
            max_bytes=10_000,
            timeout=5,
            allow_loopback=True,
            ca_certs=https_server.ca_path,
        )
    assert info.value.transient is False
    assert os.listdir(str(tmp_path)) == []


def test_missing_content_type_is_octet_stream(https_server: HTTPSTestServer, tmp_path: object) -> None:
    https_server.route("/r", lambda req: TestResponse(body=WAV))
    dest = os.path.join(str(tmp_path), "rec.wav")
    assert (
        download_audio(
            https_server.url("/r"),
            dest,
            max_bytes=10_000,
            timeout=5,
            allow_loopback=True,
            ca_certs=https_server.ca_path,
        ).format
        == "wav"
    )


# ------------------------------------------------- partial downloads clean up


def _download_fails(srv: HTTPSTestServer, tmp: str, path: str, **kw: object) -> FetchError:
    dest = os.path.join(tmp, "rec.mp3")
    with open(dest, "wb") as fh:
        fh.write(b"previous")
    with pytest.raises(FetchError) as info:
        download_audio(
            srv.url(path),
            dest,
            max_bytes=int(kw.get("max_bytes", 1 << 20)),  # type: ignore[call-overload]
            timeout=float(kw.get("timeout", 5)),  # type: ignore[arg-type]
            allow_loopback=True,
            ca_certs=srv.ca_path,
        )
    assert sorted(os.listdir(tmp)) == ["rec.mp3"], "temporary file left behind"
    with open(dest, "rb") as fh:
        assert fh.read() == b"previous", "destination clobbered"
    return info.value


def test_truncated_body_leaves_no_file(https_server: HTTPSTestServer, tmp_path: object) -> None:
    https_server.route(
        "/cut", lambda req: TestResponse(headers={"Content-Type": "audio/mpeg"}, body=[MP3_ID3], content_length=5000)
    )
    err = _download_fails(https_server, str(tmp_path), "/cut")
    assert err.transient is True


def test_oversize_download_leaves_no_file(https_server: HTTPSTestServer, tmp_path: object) -> None:
    https_server.route("/big", big_body(5_000_000, content_type="audio/mpeg", with_length=False, prefix=MP3_ID3))
    err = _download_fails(https_server, str(tmp_path), "/big", max_bytes=200_000)
    assert err.transient is False


def test_slow_download_leaves_no_file(https_server: HTTPSTestServer, tmp_path: object) -> None:
    https_server.route("/slow", drip(MP3_ID3, interval=0.05, content_type="audio/mpeg"))
    err = _download_fails(https_server, str(tmp_path), "/slow", timeout=0.6)
    assert err.transient is True


def test_unsafe_download_leaves_no_file(tmp_path: object) -> None:
    dest = os.path.join(str(tmp_path), "rec.mp3")
    with pytest.raises(UnsafeURL):
        download_audio("https://10.0.0.1/r.mp3", dest, max_bytes=10, timeout=1)
    assert os.listdir(str(tmp_path)) == []


# ------------------------------------------------------------- redaction


def _path_hash(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    "url, expected",
    [
        (
            "https://u:p@host.example.com:8443/a/b.mp3?sig=SECRET#frag",
            f"https://host.example.com:8443/…#{_path_hash('/a/b.mp3')}",
        ),
        ("https://host.example.com/r.mp3?X-Amz-Signature=SECRET", f"https://host.example.com/…#{_path_hash('/r.mp3')}"),
        # Tokenized download links and signed storage keys carry their secret in the path.
        (
            "https://host.example.com/fresh/SECRET-in-the-path/msg.mp3",
            f"https://host.example.com/…#{_path_hash('/fresh/SECRET-in-the-path/msg.mp3')}",
        ),
        ("https://[::1]:8443/x?SECRET", f"https://[::1]:8443/…#{_path_hash('/x')}"),
        ("https://host.example.com:notaport/x?SECRET", f"https://host.example.com/…#{_path_hash('/x')}"),
        ("https://host.example.com/?SECRET", "https://host.example.com/"),
        ("https://host.example.com", "https://host.example.com/"),
        ("not a url ?SECRET", f"/…#{_path_hash('not a url ')}"),
        (
            "https://h.example.com/a\nb?SECRET",
            f"https://h.example.com/…#{_path_hash('/ab')}",
        ),  # urlsplit drops newlines
    ],
)
def test_redact_url_keeps_scheme_host_and_port_and_a_hash_of_the_path(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "SECRET" not in redact_url(url)


def test_redacted_urls_of_one_host_tell_paths_apart():
    first, second = redact_url("https://h.example.com/rec/a.mp3"), redact_url("https://h.example.com/rec/b.mp3")
    assert first != second and redact_url("https://h.example.com/rec/a.mp3?sig=1") == first


def test_logs_and_errors_never_contain_query_or_path(
    https_server: HTTPSTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    https_server.route("/r/SECRET0", redirect("/missing/SECRET3?sig=SECRET2"))
    caplog.set_level(logging.DEBUG, logger="safe_fetch")
    with pytest.raises(FetchError) as info:
        get(https_server, "/r/SECRET0?sig=SECRET1")
    assert info.value.status == 404
    text = caplog.text + str(info.value)
    assert "redirect" in caplog.text and f"/…#{_path_hash('/missing/SECRET3')}" in str(info.value)
    assert "SECRET" not in text


def test_resolution_cache_remembers_verdicts_for_its_ttl():
    from safe_fetch import ResolutionCache

    answers = {"pbx.example.com": ["93.184.216.34"], "evil.example.com": ["10.0.0.5"]}
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return answers[host]

    cache = ResolutionCache(ttl=60, resolver=resolver)
    cache.check("pbx.example.com")
    cache.check("pbx.example.com")
    for _ in range(2):
        with pytest.raises(UnsafeURL):
            cache.check("evil.example.com")
    assert lookups == ["pbx.example.com", "evil.example.com"]
    expired = ResolutionCache(ttl=0, resolver=resolver)
    expired.check("pbx.example.com")
    expired.check("pbx.example.com")
    assert lookups[2:] == ["pbx.example.com", "pbx.example.com"]
