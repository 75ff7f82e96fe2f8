"""Async client for the eCFR versioner API (https://www.ecfr.gov/developers/documentation/api/v1).

    async with ECFRClient() as ecfr:
        xml = await ecfr.full_xml("2024-05-01", 42, part="406")      # bytes, feed to parsing.parse_bytes
        changed = await ecfr.changed_sections(42, since="2024-01-01")

Transient failures (HTTP 429, any 5xx, connect/read/write timeouts and other transport errors) are retried with
exponential backoff and jitter; a ``Retry-After`` header on 429/503 is honoured (capped by ``max_retry_after``).
``retries`` counts the retries after the first attempt, so a request is tried at most ``retries + 1`` times. When
every try failed, :class:`ECFRUnavailable` says which URL, how many attempts and what the last failure was.
A 404 raises :class:`ECFRNotFound` at once (a date before the title's first version, an unknown part...).
"""
from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from typing import Any

import httpx

log = logging.getLogger(__name__)

__all__ = ["ECFRClient", "ECFRError", "ECFRUnavailable", "ECFRNotFound"]


class ECFRError(RuntimeError):
    """Any failure talking to the eCFR API."""

    def __init__(self, message: str, url: str = "", status: int | None = None):
        super().__init__(message)
        self.url = url
        self.status = status


class ECFRUnavailable(ECFRError):
    """The API kept failing (429 / 5xx / timeouts) through every retry."""

    def __init__(self, message: str, url: str, status: int | None, attempts: int):
        super().__init__(message, url, status)
        self.attempts = attempts


class ECFRNotFound(ECFRError):
    """HTTP 404: the title, part or date does not exist in the eCFR."""


_RETRY_STATUS = frozenset({429}) | frozenset(range(500, 600))


class ECFRClient:
    def __init__(
        self,
        base_url: str = "https://www.ecfr.gov",
        timeout: float = 60.0,
        retries: int = 4,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_retry_after: float = 120.0,
        user_agent: str = "regs-ingest/0.1",
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.attempts_made = 0  # total HTTP attempts of this client (observability and tests)
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            headers={"User-Agent": user_agent},
            follow_redirects=True,
            transport=transport,
        )

    async def __aenter__(self) -> "ECFRClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    # ------------------------------------------------------------------------------------------------- API

    async def full_xml(self, date: str, title: int, part: str | None = None) -> bytes:
        """The XML of a title (or one part of it) as in force on ``date`` (YYYY-MM-DD)."""
        params = {"part": str(part)} if part is not None else None
        response = await self._get(f"/api/versioner/v1/full/{date}/title-{int(title)}.xml", params,
                                   accept="application/xml")
        return response.content

    async def versions(self, title: int, since: str | None = None) -> list[dict[str, Any]]:
        """The ``content_versions`` of a title: one entry per section/appendix version, each with ``identifier``,
        ``date``, ``amendment_date``, ``issue_date``, ``part``, ``type``, ``removed``, ``substantive``..."""
        params = {"issue_date[gte]": since} if since else None
        data = await self._json(f"/api/versioner/v1/versions/title-{int(title)}.json", params)
        versions = data.get("content_versions")
        if not isinstance(versions, list):
            raise ECFRError(f"eCFR versions of title {title}: no content_versions list in the response")
        return versions

    async def changed_sections(self, title: int, since: str) -> set[str]:
        """Identifiers ("101.9", "Appendix A to Part 277") of the sections and appendices of ``title`` amended,
        added or removed on or after ``since``."""
        changed: set[str] = set()
        for version in await self.versions(title, since=since):
            if version.get("type") not in (None, "section", "appendix"):
                continue
            when = version.get("issue_date") or version.get("amendment_date") or version.get("date") or ""
            identifier = version.get("identifier")
            if identifier and when >= since:  # also filter locally in case the server ignored the parameter
                changed.add(str(identifier))
        return changed

    async def titles(self) -> list[dict[str, Any]]:
        """``/titles.json``: number, name, latest_amended_on, latest_issue_date, up_to_date_as_of, reserved."""
        data = await self._json("/api/versioner/v1/titles.json", None)
        titles = data.get("titles")
        if not isinstance(titles, list):
            raise ECFRError("eCFR titles: no titles list in the response")
        return titles

    # ------------------------------------------------------------------------------------------------- transport

    async def _json(self, path: str, params: dict | None) -> dict[str, Any]:
        response = await self._get(path, params, accept="application/json")
        try:
            data = response.json()
        except ValueError as exc:
            raise ECFRError(f"eCFR returned invalid JSON for {response.request.url}: {exc}", str(response.request.url),
                            response.status_code) from exc
        if not isinstance(data, dict):
            raise ECFRError(f"eCFR returned unexpected JSON for {response.request.url}", str(response.request.url))
        return data

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.max_backoff, self.backoff * (2 ** attempt))
        delay = random.uniform(base / 2, base)  # exponential backoff with jitter
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    @staticmethod
    def _retry_after(response: httpx.Response) -> float | None:
        value = response.headers.get("Retry-After")
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())

    async def _get(self, path: str, params: dict | None, accept: str) -> httpx.Response:
        url = str(self._client.build_request("GET", path, params=params).url)
        last: str = ""
        last_status: int | None = None
        attempts = self.retries + 1
        for attempt in range(attempts):
            retry_after: float | None = None
            self.attempts_made += 1
            try:
                response = await self._client.get(path, params=params, headers={"Accept": accept})
            except httpx.TimeoutException as exc:
                last, last_status = f"{type(exc).__name__} (no reply within {self.timeout:g}s)", None
            except httpx.TransportError as exc:
                last, last_status = f"{type(exc).__name__}: {exc}", None
            else:
                status = response.status_code
                if status < 300:
                    return response
                if status == 404:
                    raise ECFRNotFound(f"eCFR: GET {url} -> HTTP 404 Not Found", url, 404)
                if status not in _RETRY_STATUS:
                    snippet = response.text[:200].strip()
                    raise ECFRError(f"eCFR: GET {url} -> HTTP {status}: {snippet}", url, status)
                last, last_status = f"HTTP {status}", status
                retry_after = self._retry_after(response)
            if attempt + 1 < attempts:
                delay = self._delay(attempt, retry_after)
                log.warning("eCFR GET %s failed (%s), retry %d/%d in %.2fs", url, last, attempt + 1, self.retries, delay)
                await asyncio.sleep(delay)
        raise ECFRUnavailable(
            f"eCFR unavailable: GET {url} failed after {attempts} attempts; last error: {last}",
            url, last_status, attempts,
        )
