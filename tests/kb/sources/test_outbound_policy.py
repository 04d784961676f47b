"""The outbound policy (kb.sources.outbound): a table of address forms and their verdicts; grants; and
the check at connect time, on the address connected to, for the website crawl (pages, robots.txt,
sitemaps, redirects; TLS still checks the URL's name) and the S3 client, with a resolver that answers
a public address first and a loopback one after (DNS rebinding), against real loopback servers that
must never be contacted."""

from __future__ import annotations

import datetime
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kb.sources.base import SourceError
from kb.sources.outbound import OutboundPolicy, OutboundRefused, http_client
from kb.sources.s3 import S3Listing
from kb.sources.website import WebsiteListing

PUBLIC = "93.184.215.14"
REFUSED = {
    # IPv4, IANA special-purpose
    "http://127.0.0.1/": "loopback", "http://127.255.255.254/": "loopback", "http://0.0.0.0/": "'this network'",
    "http://10.1.2.3/": "private", "http://100.64.0.1/": "shared address space", "http://100.127.255.254/": "shared address space",
    "http://100.100.100.200/latest/meta-data/": "cloud metadata", "http://169.254.169.254/": "cloud metadata",
    "http://169.254.1.1/": "link-local", "http://172.16.0.1/": "private", "http://172.31.255.255/": "private",
    "http://192.0.0.8/": "IETF protocol", "http://192.0.2.1/": "documentation", "http://192.88.99.1/": "6to4 relay",
    "http://192.168.1.1/": "private", "http://198.18.0.1/": "benchmarking", "http://198.51.100.7/": "documentation",
    "http://203.0.113.9/": "documentation", "http://224.0.0.1/": "multicast", "http://239.255.255.250/": "multicast",
    "http://240.0.0.1/": "reserved", "http://255.255.255.255/": "broadcast", "http://168.63.129.16/": "cloud metadata",
    # IPv4 spellings a resolver accepts
    "http://2130706433/": "loopback", "http://0177.0.0.1/": "loopback", "http://0x7f.0.0.1/": "loopback",
    "http://127.1/": "loopback", "http://0x7f000001/": "loopback", "http://0251.0376.0251.0376/": "cloud metadata",
    "http://1681915905/": "shared address space",
    # IPv6, mapped, 6to4, NAT64, Teredo
    "http://[::1]/": "loopback", "http://[::]/": "unspecified", "http://[::ffff:127.0.0.1]/": "loopback",
    "http://[::ffff:a9fe:a9fe]/": "cloud metadata", "http://[::ffff:100.64.0.1]/": "shared address space",
    "http://[2002:7f00:1::]/": "loopback", "http://[2002:a9fe:a9fe::]/": "cloud metadata",
    "http://[2002:c0a8:101::1]/": "private", "http://[64:ff9b::a9fe:a9fe]/": "cloud metadata",
    "http://[64:ff9b::7f00:1]/": "loopback", "http://[64:ff9b:1::1]/": "local-use NAT64",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/": "Teredo", "http://[2001:db8::1]/": "documentation",
    "http://[100::1]/": "discard-only", "http://[fc00::1]/": "unique local", "http://[fd12:3456::1]/": "unique local",
    "http://[fd00:ec2::254]/": "cloud metadata", "http://[fe80::1]/": "link-local", "http://[fe80::1%25eth0]/": "link-local",
    "http://[fec0::1]/": "site-local", "http://[ff02::1]/": "multicast", "http://[::127.0.0.1]/": "not a public address",
    "http://[3fff::1]/": "documentation",
    # metadata host names, refused by name before any lookup
    "http://metadata.google.internal/computeMetadata/v1/": "metadata host name",
    "http://METADATA.Google.Internal./": "metadata host name", "http://instance-data/": "metadata host name",
    "http://metadata/": "metadata host name",
}
ALLOWED = [
    "http://8.8.8.8/", "https://1.1.1.1/", f"https://{PUBLIC}:8443/x", "http://100.63.255.255/", "http://100.128.0.1/",
    "http://172.32.0.1/", "http://192.169.0.1/", "http://134744072/", "http://[2606:4700:4700::1111]/",
    "http://[2001:4860:4860::8888]/", "http://[::ffff:8.8.8.8]/", "http://[2002:808:808::]/", "http://[64:ff9b::808:808]/",
]


def no_lookup(host: str, port: int) -> list[str]:
    raise AssertionError(f"an address literal or refused name was looked up: {host!r}")


@pytest.mark.parametrize(("url", "reason"), sorted(REFUSED.items()))
def test_non_public_address_forms_are_refused(url, reason):
    with pytest.raises(OutboundRefused, match="config.start_url") as refused:
        OutboundPolicy(resolver=no_lookup).check_url(url, "config.start_url")
    assert reason in str(refused.value)


@pytest.mark.parametrize("url", ALLOWED)
def test_public_address_forms_are_allowed(url):
    OutboundPolicy(resolver=no_lookup).check_url(url, "config.start_url")


def test_the_table_is_the_issue_s_forty_forms_and_more():
    assert len(REFUSED) + len(ALLOWED) >= 40


def answers(table: dict[str, list[str]]):
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return table[host]
    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


def test_every_address_of_a_name_is_checked_and_grants_open_private_not_metadata():
    resolve = answers({"mixed.test": [PUBLIC, "10.0.0.7"], "intranet.test": ["10.0.0.5", "fd00::5"],
                       "meta.test": ["169.254.169.254"], "s3.test": ["127.0.0.1"]})
    strict = OutboundPolicy(resolver=resolve)
    with pytest.raises(OutboundRefused, match="10.0.0.7 is private"):
        strict.addresses("mixed.test", 80)
    with pytest.raises(OutboundRefused, match="10.0.0.5 is private"):
        strict.addresses("intranet.test", 80)
    granted = OutboundPolicy(resolver=resolve, private_hosts=frozenset({"intranet.test", "meta.test", "s3.test:9000"}))
    assert granted.addresses("INTRANET.test.", 443) == ["10.0.0.5", "fd00::5"]
    with pytest.raises(OutboundRefused, match="cloud metadata"):
        granted.addresses("meta.test", 80)  # a grant never opens metadata addresses
    with pytest.raises(OutboundRefused, match="10.0.0.7"):
        granted.addresses("mixed.test", 80)  # nor another name's private addresses
    assert granted.addresses("s3.test", 9000) == ["127.0.0.1"]
    with pytest.raises(OutboundRefused, match="loopback"):
        granted.addresses("s3.test", 9001)  # a host:port grant is for that port
    with pytest.raises(SourceError, match="user or password"):
        strict.check_url(f"http://u:p@{PUBLIC}/", "config.start_url")
    assert OutboundPolicy(allow_private=True, resolver=no_lookup).addresses("169.254.169.254", 80) == ["169.254.169.254"]


# --- real loopback servers -------------------------------------------------------------------------------

class Recorder:
    """A loopback HTTP server: `routes` path -> (status, headers, body) (else 200 with `default`);
    `hits` lists (path, Authorization header) of every request it received."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict, bytes]] = {}
        self.default = (200, {"Content-Type": "text/html"}, b"<html><body><p>page</p></body></html>")
        self.hits: list[tuple[str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                recorder.hits.append((self.path, self.headers.get("Authorization")))
                status, headers, body = recorder.routes.get(self.path.split("?", 1)[0], recorder.default)
                self.send_response(status)
                for k, v in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers():
    made: list[Recorder] = []

    def make() -> Recorder:
        made.append(Recorder())
        return made[-1]
    yield make
    for r in made:
        r.close()


def rebinding(*names: str):
    """A resolver for `names`: a public address on the first lookup, 127.0.0.1 on every later one."""
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        assert host in names, host
        calls.append(host)
        return [PUBLIC] if len(calls) == 1 else ["127.0.0.1"]
    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


def test_website_dns_rebinding_is_refused_at_connect_time(servers, settings):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = False
    target = servers()
    resolve = rebinding("rebind.test")
    listing = WebsiteListing({"start_url": f"http://rebind.test:{target.port}/"}, {"authorization": "Bearer t0ken"},
                             policy=OutboundPolicy(resolver=resolve))  # the config check saw the public answer
    with pytest.raises(SourceError, match=r"127\.0\.0\.1 is loopback"):
        list(listing)
    assert resolve.calls == ["rebind.test", "rebind.test"]  # resolved again to connect, and checked
    assert target.hits == []

    # the same crawl with the name granted private addresses does reach the server: the refusal above is the policy's
    granted = rebinding("rebind.test")
    list(WebsiteListing({"start_url": f"http://rebind.test:{target.port}/"}, {},
                        policy=OutboundPolicy(resolver=granted, private_hosts=frozenset({"rebind.test"}))))
    assert [p for p, _ in target.hits][:2] == ["/robots.txt", "/"]


def test_s3_dns_rebinding_is_refused_at_connect_time(servers, settings):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = False
    target = servers()
    target.default = (200, {"Content-Type": "application/xml"}, (
        b'<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>'
        b"<Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>"))
    config = {"bucket": "b", "prefix": "", "endpoint_url": f"http://s3.rebind.test:{target.port}", "region": "us-east-1"}
    secret = {"access_key_id": "AKIAREBIND", "secret_access_key": "rebind-secret"}
    resolve = rebinding("s3.rebind.test", "b.s3.rebind.test")
    listing = S3Listing(config, secret, policy=OutboundPolicy(resolver=resolve))
    with pytest.raises(SourceError, match=r"127\.0\.0\.1 is loopback"):
        list(listing)
    assert len(resolve.calls) == 2 and target.hits == []  # refused once, not retried

    granted = rebinding("s3.rebind.test", "b.s3.rebind.test")
    hosts = frozenset({"s3.rebind.test", "b.s3.rebind.test"})
    listed = S3Listing(config, secret, policy=OutboundPolicy(resolver=granted, private_hosts=hosts))
    assert list(listed) == [] and listed.complete and target.hits  # through the injected resolver, to the server


def test_a_redirect_hop_to_a_refused_address_is_refused(servers):
    site, inner = servers(), servers()
    site.routes = {"/inner": (302, {"Location": f"http://127.0.0.1:{inner.port}/secret"}, b""),
                   "/meta": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b""),
                   "/named": (302, {"Location": "http://metadata.google.internal/computeMetadata/v1/"}, b""),
                   "/mapped": (302, {"Location": f"http://[::ffff:127.0.0.1]:{inner.port}/secret"}, b"")}
    policy = OutboundPolicy(resolver=answers({"site.test": ["127.0.0.1"]}), private_hosts=frozenset({"site.test"}))
    with http_client(policy, follow_redirects=True) as client:
        assert client.get(f"http://site.test:{site.port}/page").status_code == 200  # the granted name itself
        for path, reason in (("/inner", "loopback"), ("/meta", "cloud metadata"), ("/named", "metadata host name"),
                             ("/mapped", "loopback")):
            with pytest.raises(OutboundRefused, match=reason):
                client.get(f"http://site.test:{site.port}{path}")
    assert [p for p, _ in site.hits] == ["/page", "/inner", "/meta", "/named", "/mapped"]
    assert inner.hits == []


def test_credentials_reach_their_origin_only(servers, settings):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    site, other = servers(), servers()
    off = f"http://127.0.0.1:{other.port}"
    site.routes = {
        "/": (200, {"Content-Type": "text/html"}, f'<a href="/a">a</a><a href="{off}/linked">x</a>'.encode()),
        "/a": (302, {"Location": f"{off}/redirected"}, b""),
        "/robots.txt": (200, {"Content-Type": "text/plain"}, f"Sitemap: {off}/sitemap.xml\n".encode())}
    listing = WebsiteListing({"start_url": f"http://127.0.0.1:{site.port}/"}, {"authorization": "Bearer origin-only"})
    entries = {e.key: e for e in listing}
    assert "redirects off the site" in entries["/a"].error
    assert other.hits == []  # not the link, not the redirect, not the sitemap
    assert {auth for _, auth in site.hits} == {"Bearer origin-only"}


def test_environment_proxies_are_not_used(servers, monkeypatch):
    site = servers()
    monkeypatch.setenv("HTTP_PROXY", "http://169.254.169.254:3128")
    monkeypatch.setenv("ALL_PROXY", "http://169.254.169.254:3128")
    policy = OutboundPolicy(resolver=answers({"site.test": ["127.0.0.1"]}), private_hosts=frozenset({"site.test"}))
    with http_client(policy) as client:
        assert client.get(f"http://site.test:{site.port}/").status_code == 200
    assert isinstance(client, httpx.Client) and site.hits


def test_https_through_the_policy_verifies_the_certificate_for_the_url_s_name(tmp_path, monkeypatch):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "site.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("site.test")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    site, names = Recorder(), []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    context.sni_callback = lambda sock, server_name, ctx: names.append(server_name)
    site.server.socket = context.wrap_socket(site.server.socket, server_side=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))  # trust the test's certificate
    policy = OutboundPolicy(resolver=answers({"site.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}),
                            private_hosts=frozenset({"site.test", "other.test"}))
    try:
        with http_client(policy) as client:
            assert client.get(f"https://site.test:{site.port}/").status_code == 200  # connected to 127.0.0.1
            with pytest.raises(httpx.ConnectError, match="certificate"):
                client.get(f"https://other.test:{site.port}/")  # same address, another name: not its certificate
    finally:
        site.close()
    assert names[:2] == ["site.test", "other.test"]  # SNI is the URL's host name, not the address
