"""eCFR API client against a real local HTTP server (http.server in a thread on 127.0.0.1).

Titles select the server's behaviour: 42 and 7 answer normally (shipped XML, a versions JSON), 98 answers 429
(Retry-After: 1) once and then 200, 99 answers 503 forever, 97 replies too slowly, 96 does not exist (404),
95 answers 400.
"""
from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from services.ingest.ecfr_client import ECFRClient, ECFRError, ECFRNotFound, ECFRUnavailable
from services.ingest.parsing import parse_bytes

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
PART_406 = gzip.decompress((CORPUS / "TheAxiomFoundation_axiom-corpus__title-42-part-406.xml.gz").read_bytes())

VERSIONS_42 = {
    "content_versions": [
        {"date": "2023-01-01", "amendment_date": "2023-01-01", "issue_date": "2022-11-03", "identifier": "406.13",
         "name": "§ 406.13 Individual who has end-stage renal disease.", "part": "406", "substantive": True,
         "removed": False, "subpart": "B", "title": "42", "type": "section"},
        {"date": "2024-01-01", "amendment_date": "2024-01-01", "issue_date": "2023-12-20", "identifier": "406.15",
         "name": "§ 406.15 Special provisions applicable to Medicare...", "part": "406", "substantive": True,
         "removed": False, "subpart": "B", "title": "42", "type": "section"},
        {"date": "2024-03-01", "amendment_date": "2024-03-01", "issue_date": "2024-02-15", "identifier": "406.99",
         "name": "§ 406.99 [Removed]", "part": "406", "substantive": True, "removed": True, "subpart": None,
         "title": "42", "type": "section"},
        {"date": "2024-03-01", "amendment_date": "2024-03-01", "issue_date": "2024-02-15", "identifier": "406",
         "name": "Part 406", "part": "406", "substantive": True, "removed": False, "subpart": None, "title": "42",
         "type": "part"},
    ],
    "meta": {"title": "42", "result_count": 4, "issue_date": {"gte": None}},
}
TITLES = {"titles": [{"number": 42, "name": "Public Health", "latest_amended_on": "2024-05-01",
                      "latest_issue_date": "2024-05-01", "up_to_date_as_of": "2024-05-03", "reserved": False}],
          "meta": {"date": "2024-05-03"}}


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, *args) -> None:  # keep pytest output quiet
        pass

    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json", headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        query = parse_qs(url.query)
        path = url.path
        srv = self.server
        with srv.lock:
            srv.hits[path] += 1
            n = srv.hits[path]
            srv.queries.append((path, query, dict(self.headers)))
        if path == "/api/versioner/v1/titles.json":
            return self._send(200, json.dumps(TITLES).encode())
        if path.startswith("/api/versioner/v1/versions/title-42.json"):
            body = dict(VERSIONS_42)
            since = (query.get("issue_date[gte]") or [None])[0]
            if since:  # like the real API: only versions issued on or after the date
                body = {"content_versions": [v for v in VERSIONS_42["content_versions"] if v["issue_date"] >= since]}
            return self._send(200, json.dumps(body).encode())
        if path.startswith("/api/versioner/v1/versions/title-94.json"):
            return self._send(200, b"not json at all")
        if path.startswith("/api/versioner/v1/full/") and path.endswith("/title-42.xml"):
            if query.get("part") == ["406"]:
                return self._send(200, PART_406, "application/xml")
            return self._send(404, b'{"error":"not found"}')
        if path.endswith("/title-98.xml"):
            if n == 1:
                return self._send(429, b"slow down", "text/plain", {"Retry-After": "1"})
            return self._send(200, PART_406, "application/xml")
        if path.endswith("/title-99.xml"):
            return self._send(503, b"maintenance", "text/plain")
        if path.endswith("/title-97.xml"):
            time.sleep(0.6)
            return self._send(200, PART_406, "application/xml")
        if path.endswith("/title-95.xml"):
            return self._send(400, b'{"error":"bad date"}')
        return self._send(404, b'{"error":"not found"}')


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: Counter[str] = Counter()
        self.queries: list = []
        self.lock = threading.Lock()


@pytest.fixture(scope="module")
def server():
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def base_url(server) -> str:
    server.hits.clear()
    server.queries.clear()
    return f"http://127.0.0.1:{server.server_address[1]}"


def client(base_url: str, **kw) -> ECFRClient:
    kw.setdefault("timeout", 2.0)
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    return ECFRClient(base_url=base_url, **kw)


async def test_full_xml_part_and_parse(base_url, server):
    async with client(base_url) as ecfr:
        data = await ecfr.full_xml("2024-05-01", 42, part="406")
    assert data == PART_406
    assert server.hits["/api/versioner/v1/full/2024-05-01/title-42.xml"] == 1
    path, query, headers = server.queries[0]
    assert query == {"part": ["406"]}
    assert headers.get("Accept") == "application/xml"
    units = list(parse_bytes(data, "ecfr:title-42-part-406@2024-05-01", source_date="2024-05-01"))
    assert len(units) == 25
    unit = next(u for u in units if u.section == "406.13")
    assert unit.heading == "Individual who has end-stage renal disease"
    assert unit.source_date == "2024-05-01"
    assert unit.agency == "Centers for Medicare & Medicaid Services"


async def test_versions_and_changed_sections(base_url, server):
    async with client(base_url) as ecfr:
        everything = await ecfr.versions(42)
        assert [v["identifier"] for v in everything] == ["406.13", "406.15", "406.99", "406"]
        assert everything[2]["removed"] is True
        recent = await ecfr.versions(42, since="2023-12-01")
        assert [v["identifier"] for v in recent] == ["406.15", "406.99", "406"]
        changed = await ecfr.changed_sections(42, since="2023-12-01")
    assert changed == {"406.15", "406.99"}  # sections only (removed ones included), not the part entry
    assert server.queries[1][1] == {"issue_date[gte]": ["2023-12-01"]}
    assert "issue_date[gte]" not in server.queries[0][1]


async def test_titles(base_url):
    async with client(base_url) as ecfr:
        titles = await ecfr.titles()
    assert titles[0]["number"] == 42 and titles[0]["name"] == "Public Health"


async def test_429_then_200_honours_retry_after(base_url, server):
    async with client(base_url) as ecfr:
        started = time.monotonic()
        data = await ecfr.full_xml("2024-05-01", 98)
        elapsed = time.monotonic() - started
        assert ecfr.attempts_made == 2
    assert data == PART_406
    assert server.hits["/api/versioner/v1/full/2024-05-01/title-98.xml"] == 2
    assert elapsed >= 0.95  # waited the Retry-After second, not the 10 ms backoff


async def test_503_forever_raises_unavailable_after_all_retries(base_url, server):
    async with client(base_url, retries=3) as ecfr:
        with pytest.raises(ECFRUnavailable) as err:
            await ecfr.full_xml("2024-05-01", 99)
    assert server.hits["/api/versioner/v1/full/2024-05-01/title-99.xml"] == 4  # 1 try + 3 retries
    exc = err.value
    assert exc.status == 503 and exc.attempts == 4
    assert exc.url.endswith("/api/versioner/v1/full/2024-05-01/title-99.xml")
    assert "failed after 4 attempts" in str(exc) and "HTTP 503" in str(exc) and exc.url in str(exc)


async def test_read_timeout_is_retried_then_unavailable(base_url, server):
    async with client(base_url, timeout=0.2, retries=2) as ecfr:
        started = time.monotonic()
        with pytest.raises(ECFRUnavailable) as err:
            await ecfr.full_xml("2024-05-01", 97)
        elapsed = time.monotonic() - started
    assert server.hits["/api/versioner/v1/full/2024-05-01/title-97.xml"] == 3
    assert "ReadTimeout" in str(err.value) and err.value.status is None
    assert elapsed < 2.0  # did not wait for the slow replies


async def test_slow_reply_within_timeout_succeeds(base_url):
    async with client(base_url, timeout=3.0) as ecfr:
        assert await ecfr.full_xml("2024-05-01", 97) == PART_406


async def test_404_is_not_found_without_retry(base_url, server):
    async with client(base_url) as ecfr:
        with pytest.raises(ECFRNotFound) as err:
            await ecfr.full_xml("2024-05-01", 96)
        assert ecfr.attempts_made == 1
    assert server.hits["/api/versioner/v1/full/2024-05-01/title-96.xml"] == 1
    assert err.value.status == 404 and "title-96.xml" in str(err.value)


async def test_other_4xx_is_an_error_without_retry(base_url, server):
    async with client(base_url) as ecfr:
        with pytest.raises(ECFRError) as err:
            await ecfr.full_xml("2024-05-01", 95)
    assert not isinstance(err.value, (ECFRUnavailable, ECFRNotFound))
    assert err.value.status == 400 and "bad date" in str(err.value)
    assert server.hits["/api/versioner/v1/full/2024-05-01/title-95.xml"] == 1


async def test_invalid_json_is_a_clear_error(base_url):
    async with client(base_url) as ecfr:
        with pytest.raises(ECFRError, match="invalid JSON"):
            await ecfr.versions(94)


async def test_connection_refused_is_unavailable():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with client(f"http://127.0.0.1:{port}", retries=1) as ecfr:
        with pytest.raises(ECFRUnavailable, match="ConnectError") as err:
            await ecfr.titles()
        assert ecfr.attempts_made == 2
    assert err.value.attempts == 2


def test_backoff_is_exponential_with_jitter_and_capped():
    ecfr = ECFRClient(backoff=1.0, max_backoff=8.0)
    for attempt, (low, high) in enumerate([(0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0), (4.0, 8.0)]):
        delays = {ecfr._delay(attempt, None) for _ in range(20)}
        assert all(low <= d <= high for d in delays)
        assert len(delays) > 1  # jitter
    assert ecfr._delay(0, 5.0) == 5.0  # Retry-After wins over a shorter backoff
    assert ecfr._delay(0, 10_000.0) == ecfr.max_retry_after
