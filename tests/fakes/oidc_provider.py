"""A real OpenID Connect provider on loopback for the single sign-on tests (a threaded HTTP server).

Endpoints: discovery (`/.well-known/openid-configuration`), authorize (redirects back with a code and the
state), token (checks the client secret, the redirect URI and the PKCE verifier; answers an RS256 ID token
signed with a key generated here, with the nonce of the authorization), userinfo (Bearer token) and JWKS.

A test sets what the provider says and how: `claims` (userinfo and ID token claims, `sub` and `email`...),
`id_token_extra` (claims only the ID token carries, e.g. a forged `aud`), `signing` ("key": our JWKS key;
"none": an unsigned token; "other-key": a key the JWKS does not hold). `authorize(url)` plays the browser's
visit to the authorization endpoint and returns the callback URL it redirects to.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "grounded-test-client"
CLIENT_SECRET = "grounded-test-secret"  # noqa: S105  (the fake provider's own)
KID = "test-key-1"


class FakeProvider:
    """The provider's state and its server; `base` is its issuer URL (http://127.0.0.1:<port>)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.claims: dict[str, Any] = {"sub": "person-1", "email": "ada@example.com", "email_verified": True}
        self.id_token_extra: dict[str, Any] = {}
        self.signing = "key"
        self.codes: dict[str, dict[str, str]] = {}
        self.tokens: set[str] = set()
        self.token_requests: list[dict[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def discovery_url(self) -> str:
        return f"{self.base}/.well-known/openid-configuration"

    def discovery(self) -> dict[str, Any]:
        return {"issuer": self.base, "authorization_endpoint": f"{self.base}/authorize", "token_endpoint": f"{self.base}/token",
                "userinfo_endpoint": f"{self.base}/userinfo", "jwks_uri": f"{self.base}/jwks",
                "id_token_signing_alg_values_supported": ["RS256"]}

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": KID, "alg": "RS256", "use": "sig"}]}

    def id_token(self, nonce: str) -> str:
        now = int(time.time())
        payload = {"iss": self.base, "aud": CLIENT_ID, "iat": now, "exp": now + 300, "nonce": nonce, **self.claims,
                   **self.id_token_extra}
        if self.signing == "none":
            return jwt.encode(payload, None, algorithm="none", headers={"kid": KID})
        key = self.key if self.signing == "key" else self.other_key
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": KID})

    def authorize(self, url: str) -> str:
        """The browser at the authorization endpoint (the person signs in): the callback URL it is sent back to."""
        response = requests.get(url, allow_redirects=False, timeout=5)
        assert response.status_code == 302, response.text
        return response.headers["Location"]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802  (http.server's name)
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/.well-known/openid-configuration":
                    self.answer(200, provider.discovery())
                elif parts.path == "/jwks":
                    self.answer(200, provider.jwks())
                elif parts.path == "/authorize":
                    if query.get("client_id") != CLIENT_ID or query.get("code_challenge_method") != "S256":
                        self.answer(400, {"error": "invalid_request"})
                        return
                    code = secrets.token_urlsafe(16)
                    provider.codes[code] = {"nonce": query.get("nonce", ""), "challenge": query.get("code_challenge", ""),
                                            "redirect_uri": query["redirect_uri"]}
                    target = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
                    self.answer(302, None, {"Location": target})
                elif parts.path == "/userinfo":
                    token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    if token not in provider.tokens:
                        self.answer(401, {"error": "invalid_token"})
                        return
                    self.answer(200, provider.claims)
                else:
                    self.answer(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                if urlsplit(self.path).path != "/token":
                    self.answer(404, {"error": "not found"})
                    return
                form = {k: v[-1] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
                provider.token_requests.append(form)
                grant = provider.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                if (grant is None or form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET
                        or form.get("redirect_uri") != grant["redirect_uri"] or challenge != grant["challenge"]):
                    self.answer(400, {"error": "invalid_grant"})
                    return
                access = secrets.token_urlsafe(16)
                provider.tokens.add(access)
                self.answer(200, {"access_token": access, "token_type": "Bearer", "expires_in": 300,
                                  "id_token": provider.id_token(grant["nonce"])})

        return Handler
