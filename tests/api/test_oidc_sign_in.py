"""Single sign-on through a company's OpenID Connect provider (tenants/oidc.py, api/oidc.py), against a real
provider on loopback (tests/fakes/oidc_provider.py): the whole flow through Django's test client, and what
it must refuse (unknown, unverified, ambiguous, inactive and superuser accounts, forged or unsigned tokens,
another session's state), and that a claim never widens what a person may do."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.principals import tenants_of_user
from tests.factories import make_membership, make_staff_user, make_tenant
from tests.fakes.oidc_provider import CLIENT_ID, CLIENT_SECRET, FakeProvider
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

BACKEND = "tenants.oidc.CompanySignInBackend"


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


@pytest.fixture
def provider(settings, monkeypatch):
    """The fake provider, and single sign-on configured for it through discovery (loopback only: no proxy)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeProvider() as fake:
        settings.OIDC_RP_CLIENT_ID = CLIENT_ID
        settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
        settings.OIDC_OP_DISCOVERY_URL = fake.discovery_url
        settings.OIDC_PROVIDER_NAME = "Example SSO"
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, BACKEND]
        yield fake


def account(username: str, email: str, tenant, role: str = "reader", *, active: bool = True):
    user = get_user_model().objects.create_user(username=username, email=email, password="pw-sso-12345", is_active=active)
    make_membership(user, tenant, role, all_departments=True)
    return user


def through_provider(client: Client, provider: FakeProvider, next_url: str = "/"):
    """/oidc/authenticate/ -> the provider's authorize (the person signs in there) -> our callback; its response."""
    start = client.get("/oidc/authenticate/", {"next": next_url})
    assert start.status_code == 302 and start.url.startswith(f"{provider.base}/authorize?"), start
    back = urlsplit(provider.authorize(start.url))
    assert back.netloc == "testserver" and back.path == "/oidc/callback/"
    return client.get(f"{back.path}?{back.query}")


def signed_in_as(client: Client) -> int | None:
    value = client.session.get("_auth_user_id")
    return int(value) if value else None


def sign_in_page(client: Client) -> str:
    return client.get("/login/").content.decode()


def test_off_by_default_no_urls_no_button_no_backend(db):
    assert not django_settings.OIDC_RP_CLIENT_ID and BACKEND not in django_settings.AUTHENTICATION_BACKENDS
    client = Client()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/", {"code": "x", "state": "y"}).status_code == 404
    assert "Sign in with" not in sign_in_page(client)
    assert "Sign in with" not in client.get("/admin/login/").content.decode()


def test_an_existing_account_signs_in_through_the_provider_and_lands_in_the_chat(db, provider):
    acme = make_tenant("Acme")
    ada = account("ada", "Ada@Example.com", acme)
    client = Client()
    page = sign_in_page(client)
    assert "Sign in with Example SSO" in page and "/oidc/authenticate/?next=%2F" in page
    assert "Sign in with Example SSO" in client.get("/admin/login/?next=/admin/").content.decode()

    start = client.get("/oidc/authenticate/", {"next": "/"})
    request = {k: v[-1] for k, v in parse_qs(urlsplit(start.url).query).items()}
    assert request["client_id"] == CLIENT_ID and request["scope"] == "openid email"
    assert request["nonce"] and request["state"] and request["code_challenge_method"] == "S256"
    done = client.get(_callback(provider.authorize(start.url)))
    assert done.status_code == 302 and done.url == "/"
    assert signed_in_as(client) == ada.pk
    chat = client.get("/")
    assert chat.status_code == 200 and "Ask Acme" in chat.content.decode()
    # The code was exchanged with our secret and the PKCE verifier; nothing about the account changed.
    assert provider.token_requests[-1]["client_secret"] == CLIENT_SECRET and provider.token_requests[-1]["code_verifier"]
    ada_now = get_user_model().objects.get(pk=ada.pk)
    assert (ada_now.email, ada_now.password, ada_now.is_staff) == (ada.email, ada.password, False)


def test_next_is_kept_and_another_host_is_not(db, provider):
    ada = account("ada", "ada@example.com", make_tenant("Acme"))
    done = through_provider(Client(), provider, next_url="/?tenant=acme")
    assert done.url == "/?tenant=acme"
    elsewhere = Client()
    done = through_provider(elsewhere, provider, next_url="https://evil.example/")
    assert done.url == "/" and signed_in_as(elsewhere) == ada.pk


def _callback(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


@pytest.mark.parametrize(("claims", "message"), [
    ({"email": "nobody@example.com"}, "No account here uses the email address nobody@example.com"),
    ({"email_verified": False}, "has not verified the email address ada@example.com"),
    ({"email_verified": "false"}, "has not verified the email address"),
    ({"email": ""}, "did not tell us your email address"),
])
def test_unknown_unverified_or_missing_emails_are_refused_and_nothing_is_created(db, provider, claims, message):
    account("ada", "ada@example.com", make_tenant("Acme"))
    users_before = get_user_model().objects.count()
    provider.claims.update(claims)
    client = Client()
    done = through_provider(client, provider)
    assert done.status_code == 302 and done.url == "/login/?next=%2F"
    assert signed_in_as(client) is None and client.get("/").status_code == 302
    assert message in sign_in_page(client)
    assert get_user_model().objects.count() == users_before


def test_an_email_of_several_accounts_is_ambiguous_and_signs_in_none(db, provider):
    account("ada", "ada@example.com", make_tenant("Acme"))
    account("ada-globex", "ADA@example.com", make_tenant("Globex"))
    client = Client()
    through_provider(client, provider)
    assert signed_in_as(client) is None
    assert "Several accounts here use the email address ada@example.com" in sign_in_page(client)


def test_an_invited_account_not_yet_accepted_is_refused(db, provider):
    account("ada", "ada@example.com", make_tenant("Acme"), active=False)
    client = Client()
    through_provider(client, provider)
    assert signed_in_as(client) is None
    assert "accept your invitation first" in sign_in_page(client)


def test_claims_never_widen_a_tenant_membership_or_role(db, provider):
    acme, globex = make_tenant("Acme"), make_tenant("Globex")
    account("ada", "ada@example.com", acme, role="admin")
    bob = account("bob", "bob@globex.example", globex, role="reader")
    # Bob's provider says he is Acme's admin, staff and superuser: only his email is read.
    provider.claims.update({"email": "bob@globex.example", "tenant": "acme", "tenant_id": acme.pk, "role": "admin",
                            "groups": ["acme-admins"], "is_staff": True, "is_superuser": True,
                            "preferred_username": "ada"})
    provider.id_token_extra = {"tenant": "acme", "role": "admin"}
    client = Client()
    through_provider(client, provider)
    assert signed_in_as(client) == bob.pk
    assert "Ask Globex" in client.get("/").content.decode()
    elsewhere = client.get(f"/?tenant={acme.slug}").content.decode()  # not a member there, whatever the claim said
    assert "Ask Acme" not in elsewhere and "you are not a member of a tenant" in elsewhere
    assert client.get("/admin/").status_code == 302  # not staff
    bob_now = get_user_model().objects.get(pk=bob.pk)
    assert (bob_now.is_staff, bob_now.is_superuser, bob_now.username) == (False, False, "bob")
    assert [(c.slug, c.role) for c in tenants_of_user(bob_now)] == [(globex.slug, "reader")]


@pytest.mark.parametrize("forgery", ["none", "other-key", "audience", "issuer"])
def test_a_forged_or_unsigned_id_token_is_refused(db, provider, forgery):
    ada = account("ada", "ada@example.com", make_tenant("Acme"))
    if forgery in ("none", "other-key"):
        provider.signing = forgery
    elif forgery == "audience":
        provider.id_token_extra = {"aud": "another-client"}
    else:
        provider.id_token_extra = {"iss": "https://attacker.example"}
    client = Client()
    done = through_provider(client, provider)
    assert done.status_code == 302 and done.url.startswith("/login/")
    assert signed_in_as(client) is None and signed_in_as(client) != ada.pk
    assert "could not be verified" in sign_in_page(client)


def test_a_callback_with_another_state_or_from_another_browser_is_refused(db, provider):
    account("ada", "ada@example.com", make_tenant("Acme"))
    client = Client()
    start = client.get("/oidc/authenticate/", {"next": "/"})
    back = urlsplit(provider.authorize(start.url))
    code = parse_qs(back.query)["code"][0]
    forged = client.get("/oidc/callback/", {"code": code, "state": "not-the-state-we-sent"})
    assert forged.status_code == 400 and signed_in_as(client) is None
    # The attacker's own code, sent into a victim's browser that started no sign-in: refused, with a message.
    attacker = Client()
    start = attacker.get("/oidc/authenticate/")
    victim = Client()
    done = victim.get(_callback(provider.authorize(start.url)))
    assert done.url.startswith("/login/") and signed_in_as(victim) is None
    assert "started in another browser" in sign_in_page(victim)


def test_a_password_form_posted_with_a_code_in_the_url_never_reaches_the_provider(db, provider):
    account("ada", "ada@example.com", make_tenant("Acme"))
    client = Client()
    response = client.post("/login/?code=abc&state=def", {"username": "ada", "password": "wrong"})
    assert response.status_code == 200 and signed_in_as(client) is None and provider.token_requests == []


def test_an_unreachable_provider_sends_back_to_the_sign_in_page_with_a_message(db, settings):
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_OP_DISCOVERY_URL = "http://127.0.0.1:9/.well-known/openid-configuration"  # discard port: refused
    client = Client()
    done = client.get("/oidc/authenticate/")
    assert done.status_code == 302 and done.url == "/login/"
    assert "identity provider cannot be reached" in sign_in_page(client)


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_a_superuser_is_never_signed_in_nor_changed(provider):
    root = make_staff_user("root", "pw-root-12345", superuser=True, email="root@example.com")
    provider.claims.update({"email": "root@example.com"})
    client = Client()
    through_provider(client, provider)
    assert signed_in_as(client) is None
    assert "signs in with its password only" in sign_in_page(client)
    root_now = get_user_model().objects.get(pk=root.pk)
    assert (root_now.password, root_now.email, root_now.last_login, root_now.is_active) == (
        root.password, root.email, root.last_login, True)
