"""Source credentials at rest: Fernet (AES-128-CBC + HMAC-SHA256) with a key from the environment.

SOURCES_ENCRYPTION_KEY is a Fernet key; without one the key is derived from SECRET_KEY (so a
rotated SECRET_KEY makes stored credentials unreadable: they must be entered again). Plaintext never
leaves this module except to the connector that uses it; nothing here logs.
"""

from __future__ import annotations

import base64
import hashlib
import json

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from tenants.conf import product_settings


class SecretUnreadable(ValueError):
    """The stored credentials cannot be decrypted with the configured key."""


def _fernet() -> Fernet:
    key = product_settings.SOURCES_ENCRYPTION_KEY
    if not key:
        digest = hashlib.sha256(b"grounded-sources:" + settings.SECRET_KEY.encode()).digest()
        key = base64.urlsafe_b64encode(digest).decode()
    return Fernet(key)


def encrypt_secret(values: dict[str, str]) -> str:
    """Encrypt a small dict of credentials; an empty dict stores nothing."""
    if not values:
        return ""
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def decrypt_secret(token: str) -> dict[str, str]:
    if not token:
        return {}
    try:
        return json.loads(_fernet().decrypt(token.encode()))
    except (InvalidToken, ValueError):
        raise SecretUnreadable("stored credentials cannot be decrypted with the configured key: enter them again") from None
