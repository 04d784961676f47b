"""Website source: a start URL (and its sitemap), crawled on the same host only, robots.txt respected,
within limits of pages, depth, bytes per page, time per request and time in all. Pages go through the
HTML parser like uploads. Signature: the content hash (a page must be fetched to find its links).

config: {"start_url": "https://intranet.example/handbook/", "sitemap_url": "", "max_pages": 500,
         "max_depth": 5, "max_page_bytes": 5242880, "timeout_seconds": 10, "time_limit_seconds": 600}
An item's key is the page's path (and query): mapping rules use path prefixes such as "/hr/".
A crawl stopped by a limit is incomplete: pages not reached are not removed.
Every connection goes through the outbound policy (kb.sources.outbound); the credentials (an
Authorization header) are sent to the start URL's origin only, and a redirect off it is not followed.
"""

from __future__ import annotations

import hashlib
import time
import urllib.robotparser
from collections import deque
from collections.abc import Iterator
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx
from lxml import etree, html

from kb.sources.base import ConfigField, Entry, SourceError
from kb.sources.outbound import OutboundPolicy, OutboundRefused, http_client, url_origin
from tenants.conf import product_settings

FIELDS = (
    ConfigField("start_url", "Start URL", type="url", required=True, help="Pages on this URL's host are crawled from here."),
    ConfigField("sitemap_url", "Sitemap URL", type="url", help="Optional, on the start URL's host; else robots.txt's."),
    ConfigField("max_pages", "Max pages", type="int", help="Empty: the server's limit (never above it)."),
    ConfigField("max_depth", "Max link depth", type="int", help="Empty: the server's limit."),
    ConfigField("max_page_bytes", "Max bytes per page", type="int", help="Empty: the server's limit."),
    ConfigField("timeout_seconds", "Timeout per request (s)", type="float", help="Empty: the server's limit."),
    ConfigField("time_limit_seconds", "Time limit per crawl (s)", type="int", help="Empty: the server's limit."),
    ConfigField("authorization", "Authorization header", secret=True,
                help='e.g. "Bearer ...": sent to the start URL\'s origin only.'),
)
FAULT_FIELD = "start_url"

USER_AGENT = "grounded-sources/1.0"
_TYPES = {"text/html": "text/html", "application/xhtml+xml": "text/html", "text/plain": "text/plain",
          "text/markdown": "text/markdown", "application/pdf": "application/pdf"}
_MAX_REDIRECTS = 5


def limits(config: dict) -> dict:
    """The crawl limits: the source's own, never above the server's."""
    caps = {"max_pages": product_settings.SOURCES_WEB_MAX_PAGES, "max_depth": product_settings.SOURCES_WEB_MAX_DEPTH,
            "max_page_bytes": product_settings.SOURCES_WEB_MAX_PAGE_BYTES,
            "timeout_seconds": product_settings.SOURCES_WEB_TIMEOUT_SECONDS,
            "time_limit_seconds": product_settings.SOURCES_WEB_TIME_LIMIT_SECONDS}
    out = {}
    for name, cap in caps.items():
        raw = config.get(name, cap)
        try:
            value = float(raw) if name == "timeout_seconds" else int(raw)
        except (TypeError, ValueError):
            raise SourceError(f"config.{name}: must be a number") from None
        if value < 0 or (value == 0 and name != "max_depth"):
            raise SourceError(f"config.{name}: must be positive")
        out[name] = min(value, cap)
    return out


def check_config(config: dict, policy: OutboundPolicy | None = None) -> dict:
    """The clean config; raises SourceError naming the field (a start URL the policy refuses included)."""
    start = config.get("start_url")
    if not isinstance(start, str) or not start.startswith(("http://", "https://")):
        raise SourceError("config.start_url: an http:// or https:// URL is required")
    (policy or OutboundPolicy.from_settings()).check_url(start, "config.start_url")
    sitemap = str(config.get("sitemap_url") or "")
    if sitemap and _origin(sitemap) != _origin(start):
        raise SourceError("config.sitemap_url: must be on the start URL's host")
    return {"start_url": start, "sitemap_url": sitemap, **limits(config)}


def credential_origin(config: dict) -> tuple:
    """What the source's credentials are bound to: the start URL's scheme, host and port."""
    return url_origin(str(config.get("start_url") or ""))


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def _key(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class _TooLarge(Exception):
    pass


class WebsiteListing:
    """The crawl. `policy` decides where connections may go (default: from settings)."""

    def __init__(self, config: dict, secret: dict, policy: OutboundPolicy | None = None) -> None:
        policy = policy or OutboundPolicy.from_settings()
        self.config = check_config(config, policy)
        self.limits = limits(config)
        self.origin = _origin(self.config["start_url"])
        self.complete = False
        self.client = http_client(policy, timeout=self.limits["timeout_seconds"], follow_redirects=False,
                                  headers={"User-Agent": USER_AGENT})
        self.auth = {"Authorization": secret["authorization"]} if secret.get("authorization") else {}
        self.deadline = time.monotonic() + self.limits["time_limit_seconds"]

    def __iter__(self) -> Iterator[Entry]:
        try:
            yield from self._crawl()
        finally:
            self.client.close()

    def _crawl(self) -> Iterator[Entry]:
        robots = self._robots()
        queue: deque[tuple[str, int]] = deque([(self._norm(self.config["start_url"]), 0)])
        sitemaps = [self.config["sitemap_url"]] if self.config["sitemap_url"] else list(robots.site_maps() or [])
        for url in self._sitemap_urls(sitemaps):
            queue.append((url, 0))
        queued = {u for u, _ in queue}
        pages = 0
        truncated = False
        while queue:
            if time.monotonic() > self.deadline or pages >= self.limits["max_pages"]:
                truncated = True
                break
            url, depth = queue.popleft()
            if not robots.can_fetch(USER_AGENT, url):
                continue
            pages += 1
            entry, links = self._page(url)
            if entry is not None:
                yield entry
            for link in links:
                if link in queued:
                    continue
                if depth + 1 > self.limits["max_depth"]:
                    truncated = True
                    continue
                queued.add(link)
                queue.append((link, depth + 1))
        self.complete = not truncated

    def _norm(self, url: str) -> str:
        return urldefrag(url)[0]

    def _same_host(self, url: str) -> bool:
        return _origin(url) == self.origin

    def _get(self, url: str) -> tuple[int, str, bytes, str]:
        """(status, content type, body, redirect target or ""); raises _TooLarge or httpx errors."""
        remaining = max(0.1, self.deadline - time.monotonic())
        timeout = min(self.limits["timeout_seconds"], remaining)
        headers = self.auth if self._same_host(url) else {}  # credentials never leave their origin
        with self.client.stream("GET", url, timeout=timeout, headers=headers) as resp:
            if resp.is_redirect:
                return resp.status_code, "", b"", urljoin(url, resp.headers.get("location", ""))
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.limits["max_page_bytes"]:
                raise _TooLarge()
            body = bytearray()
            started = time.monotonic()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > self.limits["max_page_bytes"]:
                    raise _TooLarge()
                if time.monotonic() - started > timeout:
                    raise httpx.ReadTimeout("page took too long")
            return resp.status_code, resp.headers.get("content-type", ""), bytes(body), ""

    def _page(self, url: str) -> tuple[Entry | None, list[str]]:
        key = _key(url)
        current = url
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                status, ctype, body, target = self._get(current)
                if not target:
                    break
                target = self._norm(target)
                if not self._same_host(target):
                    return _failed(key, f"redirects off the site to {urlsplit(target).netloc}"), []
                if _key(target) != key:  # the target is a page of its own: crawl it under its own key
                    return None, [target]
                current = target
            else:
                return _failed(key, "too many redirects"), []
        except OutboundRefused as exc:
            return _failed(key, str(exc)), []
        except _TooLarge:
            return _failed(key, f"larger than {self.limits['max_page_bytes']} bytes"), []
        except httpx.TimeoutException:
            return _failed(key, "timed out"), []
        except httpx.HTTPError as exc:
            return _failed(key, f"cannot fetch: {type(exc).__name__}"), []
        if status in (404, 410):
            return None, []  # gone: not listed, so removed after a complete crawl
        if status != 200:
            return _failed(key, f"HTTP {status}"), []
        mime = _TYPES.get(ctype.split(";", 1)[0].strip().lower())
        if mime is None:
            return None, []  # images, archives, ...: not documents
        links = self._links(current, body) if mime == "text/html" else []
        sha = hashlib.sha256(body).hexdigest()
        return Entry(key=key, signature=sha, size=len(body), fetch=lambda: body, mime_type=mime), links

    def _links(self, base: str, body: bytes) -> list[str]:
        try:
            tree = html.fromstring(body)
        except (etree.ParserError, ValueError):
            return []
        out = []
        for anchor in tree.getroottree().iter("a"):
            href = anchor.get("href")
            if href is None:
                continue
            url = self._norm(urljoin(base, href.strip()))
            if url.startswith(("http://", "https://")) and self._same_host(url):
                out.append(url)
        return out

    def _robots(self) -> urllib.robotparser.RobotFileParser:
        parser = urllib.robotparser.RobotFileParser()
        url = f"{self.origin[0]}://{self.origin[1]}/robots.txt"
        try:
            status, _, body, _ = self._get(url)
        except (_TooLarge, httpx.HTTPError):
            status, body = 500, b""
        if status == 200:
            parser.parse(body.decode("utf-8", "replace").splitlines())
        elif 400 <= status < 500:
            parser.parse([])  # no robots.txt (4xx): no rules, everything may be fetched
        else:
            raise SourceError(f"robots.txt could not be read (HTTP {status}): not crawling")
        return parser

    def _sitemap_urls(self, sitemaps: list[str], depth: int = 0) -> list[str]:
        urls: list[str] = []
        for sm in sitemaps[:20]:
            if not self._same_host(sm):
                continue
            try:
                status, _, body, _ = self._get(sm)
                root = etree.fromstring(body, parser=etree.XMLParser(resolve_entities=False, no_network=True)) if status == 200 else None
            except (_TooLarge, httpx.HTTPError, etree.XMLSyntaxError, OutboundRefused):
                continue
            if root is None:
                continue
            locs = [e.text.strip() for e in root.iter("{*}loc") if e.text]
            if etree.QName(root).localname == "sitemapindex" and depth < 2:
                urls += self._sitemap_urls(locs, depth + 1)
            else:
                urls += [self._norm(u) for u in locs if self._same_host(u)]
        return urls


def _failed(key: str, reason: str) -> Entry:
    return Entry(key=key, signature="", size=0, fetch=lambda: b"", error=reason)
