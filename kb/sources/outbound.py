"""The outbound policy: where a source may connect. One module every connector calls (website pages,
robots.txt, sitemaps, redirects, S3 endpoints, any future connector). Pure: no ORM.

The rule (OWASP's SSRF prevention): resolve the host once, check every address it resolves to against
the IANA special-purpose registries, connect to an address that was checked, never re-resolve. The
check runs at connect time, for every connection, on the address actually connected to, so a name
that answers a public address when a source is saved and a private one later (DNS rebinding) does
not pass. `check_url` runs the same check when a source is created or changed, for an early 400.

Refused: every address that is not public (loopback, private, shared address space 100.64/10,
link-local, documentation, benchmarking, multicast, reserved, broadcast, unspecified; the IPv4 inside
IPv4-mapped, NAT64 and 6to4 IPv6 addresses is judged as IPv4; Teredo and local-use NAT64 are refused
outright), cloud metadata addresses, and metadata host names. SOURCES_ALLOW_PRIVATE_HOSTS=on allows
everything (tests with loopback servers, single-network installs). Host names an operator granted a
tenant (`private_hosts`) may resolve to private and loopback addresses, never to metadata, link-local
or multicast ones.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from kb.sources.base import SourceError
from tenants.conf import product_settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

# (network, what it is, whether a granted host may use it): IPv4, then IPv6. The first match of the
# address's own version wins.
_SPECIAL_NETWORKS: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str, bool]] = [
    (ipaddress.ip_network(n), what, grantable) for n, what, grantable in (
    ("0.0.0.0/8", "'this network'", False),
    ("10.0.0.0/8", "private", True),
    ("100.64.0.0/10", "shared address space", True),
    ("127.0.0.0/8", "loopback", True),
    ("169.254.0.0/16", "link-local", False),
    ("172.16.0.0/12", "private", True),
    ("192.0.0.0/24", "IETF protocol assignments", False),
    ("192.0.2.0/24", "documentation", False),
    ("192.88.99.0/24", "6to4 relay anycast", False),
    ("192.168.0.0/16", "private", True),
    ("198.18.0.0/15", "benchmarking", False),
    ("198.51.100.0/24", "documentation", False),
    ("203.0.113.0/24", "documentation", False),
    ("224.0.0.0/4", "multicast", False),
    ("255.255.255.255/32", "broadcast", False),
    ("240.0.0.0/4", "reserved", False),
    ("::/128", "unspecified", False),
    ("::1/128", "loopback", True),
    ("64:ff9b:1::/48", "local-use NAT64", False),
    ("100::/64", "discard-only", False),
    ("2001::/32", "Teredo", False),
    ("2001:db8::/32", "documentation", False),
    ("3fff::/20", "documentation", False),
    ("fc00::/7", "unique local (private)", True),
    ("fe80::/10", "link-local", False),
    ("fec0::/10", "site-local", False),
    ("ff00::/8", "multicast", False),
)]
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle ...
    "169.254.170.2",  # AWS ECS task metadata
    "169.254.170.23",  # AWS EKS pod identity
    "100.100.100.200",  # Alibaba Cloud
    "168.63.129.16",  # Azure WireServer (a public address that answers inside Azure only)
    "fd00:ec2::254",  # AWS IMDS over IPv6
    "fd00:ec2::23",  # AWS EKS pod identity over IPv6
))
METADATA_HOSTS = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
    "metadata.tencentyun.com", "metadata.azure.internal",
})


class OutboundRefused(SourceError):
    """The policy refuses to connect to this host or address (the message names both, never a credential)."""


def _classify(addr: IPAddress) -> tuple[str, bool] | None:
    """(what the address is, whether a granted host may use it), or None for a public address."""
    if addr in METADATA_ADDRESSES:
        return "a cloud metadata address", False
    if isinstance(addr, ipaddress.IPv6Address):
        if addr in _MAPPED or addr in _NAT64:  # the IPv4 address in the last 32 bits is the one reached
            inner = _classify(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
            return None if inner is None else (f"{inner[0]} (inside {addr})", inner[1])
        if addr in _SIX_TO_FOUR:  # 2002:AABB:CCDD::/48 routes to AA.BB.CC.DD
            inner = _classify(ipaddress.IPv4Address((int(addr) >> 80) & 0xFFFFFFFF))
            return None if inner is None else (f"{inner[0]} (inside 6to4 {addr})", False)
    for network, what, grantable in _SPECIAL_NETWORKS:
        if network.version == addr.version and addr in network:
            return f"{what} ({network})", grantable
    # Whatever else Python's registry copy calls non-public (IPv4-compatible ::/96, ORCHID, unallocated ...).
    if addr.is_private or addr.is_reserved or addr.is_multicast or addr.is_link_local or addr.is_unspecified or \
            addr.is_loopback or (isinstance(addr, ipaddress.IPv6Address) and addr.is_site_local):
        return "not a public address", False
    return None


def address_problem(addr: IPAddress) -> str | None:
    """What makes `addr` non-public (e.g. "shared address space (100.64.0.0/10)"), or None if it is public."""
    found = _classify(addr)
    return None if found is None else found[0]


_NUMERIC = re.compile(r"[0-9][0-9a-fA-FxX.]*")


def ip_literal(host: str) -> IPAddress | None:
    """The address `host` spells, in any form a resolver accepts (dotted, decimal 2130706433, octal
    0177.0.0.1, hex 0x7f.0.0.1, short 127.1, bracketed or zoned IPv6), or None for a name."""
    host = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))  # the C library's reading, as getaddrinfo's
        except OSError:
            return None
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (TCP), in the resolver's order; raises OSError."""
    out: list[str] = []
    for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP):
        addr = str(info[4][0])
        if addr not in out:
            out.append(addr)
    return out


@dataclass(frozen=True)
class OutboundPolicy:
    """Where connections may go. `allow_private`: everything allowed (SOURCES_ALLOW_PRIVATE_HOSTS);
    `private_hosts`: hosts ("name", any port, or "name:port") whose private and loopback addresses are
    allowed (per-tenant grants: kb.sources.grants.granted_private_hosts);
    `resolver`: host, port -> addresses (injectable; every connection resolves once through it)."""

    allow_private: bool = False
    private_hosts: frozenset[str] = frozenset()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_settings(cls, *, private_hosts: Iterable[str] = (), resolver: Resolver | None = None) -> OutboundPolicy:
        return cls(allow_private=bool(product_settings.SOURCES_ALLOW_PRIVATE_HOSTS),
                   private_hosts=frozenset(_name(h) for h in private_hosts), resolver=resolver or system_resolver)

    def addresses(self, host: str, port: int, what: str = "") -> list[str]:
        """The addresses to connect to for `host`: resolved once, every one checked. Raises
        OutboundRefused if the name or any address is refused, or the name does not resolve."""
        label = f"{what}: " if what else ""
        name = _name(host)
        literal = ip_literal(name)
        if literal is not None:
            found = [literal]
        else:
            if name in METADATA_HOSTS and not self.allow_private:
                raise OutboundRefused(f"{label}{host!r} is a cloud metadata host name")
            try:
                found = [ip_literal(a) or _unreadable(a) for a in self.resolver(name, port)]
            except (OSError, ValueError) as exc:  # ValueError: UnicodeError of a name IDNA cannot encode
                raise OutboundRefused(f"{label}cannot resolve {host!r}: {exc}") from None
            if not found:
                raise OutboundRefused(f"{label}{host!r} resolves to no address")
        if not self.allow_private:
            granted = bool({name, f"{name}:{port}", f"[{name}]:{port}"} & self.private_hosts)
            for addr in found:
                self._check(granted, host, addr, label)
        return [str(a) for a in found]

    def _check(self, granted: bool, host: str, addr: IPAddress, label: str) -> None:
        problem = _classify(addr)
        if problem is None or (problem[1] and granted):
            return
        raise OutboundRefused(f"{label}{host!r} is a private or local address: {addr} is {problem[0]} "
                              "(sources reach public addresses only; SOURCES_ALLOW_PRIVATE_HOSTS is off)")

    def check_url(self, url: str, what: str) -> None:
        """The create-time check of a source's URL: a host, no user or password in it, and (unless
        private hosts are allowed) every address it resolves to allowed. Raises SourceError naming `what`."""
        parts = urlsplit(url)
        if not parts.hostname:
            raise SourceError(f"{what}: no host in the URL")
        if parts.username or parts.password:
            raise SourceError(f"{what}: no user or password in the URL (give them as credentials)")
        if self.allow_private:
            return
        self.addresses(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), what)


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _unreadable(addr: str) -> IPAddress:
    raise OSError(f"the resolver answered {addr!r}, not an address")


def url_origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of `url`, the default port filled in: what credentials are bound to."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, _name(parts.hostname or ""), parts.port or {"http": 80, "https": 443}.get(scheme, 0)


# --- HTTP clients ----------------------------------------------------------------------------------

def http_client(policy: OutboundPolicy, **kwargs) -> httpx.Client:
    """An httpx client whose every connection (redirect hops included) goes through `policy`: the
    host is resolved once, every address checked, and a checked address connected to; TLS still
    verifies the certificate for the URL's host name (SNI and Host unchanged). Environment proxies
    and .netrc are ignored (a proxy would hide the destination from the check; .netrc would add
    credentials the source was not given); SSL_CERT_FILE still applies."""
    return httpx.Client(transport=_PolicyTransport(policy), trust_env=False, **kwargs)


class _PolicyBackend(httpcore.SyncBackend):
    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        failure: Exception | None = None
        for addr in self.policy.addresses(host, port):
            try:
                return super().connect_tcp(addr, port, timeout=timeout, local_address=local_address,
                                           socket_options=socket_options)
            except httpcore.ConnectError as exc:  # unreachable address: try the next checked one
                failure = exc
        raise failure or httpcore.ConnectError(f"cannot connect to {host!r}")


class _PolicyTransport(httpx.HTTPTransport):
    """httpx's transport with the connection pool's network backend replaced by the policy's."""

    def __init__(self, policy: OutboundPolicy) -> None:
        super().__init__()
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's defaults
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(),
                                             max_connections=limits.max_connections,
                                             max_keepalive_connections=limits.max_keepalive_connections,
                                             keepalive_expiry=limits.keepalive_expiry, network_backend=_PolicyBackend(policy))
