"""S3-compatible bucket source (AWS S3, MinIO, Ceph, R2, ...) through boto3. Signature: the ETag, so
an unchanged object is never downloaded.

config: {"bucket": "policies", "prefix": "handbook/", "endpoint_url": "https://minio.example:9000",
         "region": "us-east-1"}
secret: {"access_key_id": "...", "secret_access_key": "..."} (optional: anonymous access without)
Every connection goes through the outbound policy (kb.sources.outbound): requests are sent by a
botocore session whose urllib3 connections resolve the host once, check every address and connect to
a checked one. Environment proxies are not used.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

from kb.sources.base import ConfigField, Entry, ItemError, SourceError
from kb.sources.outbound import OutboundPolicy, OutboundRefused, url_origin
from tenants.conf import product_settings

FIELDS = (
    ConfigField("bucket", "Bucket", required=True),
    ConfigField("prefix", "Prefix", help='Only objects whose key starts with this, e.g. "handbook/".'),
    ConfigField("endpoint_url", "Endpoint URL", type="url",
                help="For MinIO, Ceph, R2...: e.g. https://minio.example:9000. Empty: AWS S3."),
    ConfigField("region", "Region", help="Default us-east-1."),
    ConfigField("access_key_id", "Access key id", secret=True, help="Empty (with the secret): anonymous access."),
    ConfigField("secret_access_key", "Secret access key", secret=True),
)
FAULT_FIELD = "bucket"
# S3 error codes (in a listing's SourceError) -> the setting at fault.
FAULT_CODES = {"NoSuchBucket": "bucket", "InvalidBucketName": "bucket", "AccessDenied": "access_key_id",
               "InvalidAccessKeyId": "access_key_id", "SignatureDoesNotMatch": "secret_access_key",
               "EndpointConnectionError": "endpoint_url", "ConnectTimeoutError": "endpoint_url",
               "OutboundRefused": "endpoint_url"}

_TIMEOUT = 30


def check_config(config: dict, policy: OutboundPolicy | None = None) -> dict:
    """The clean config; raises SourceError naming the field (an endpoint the policy refuses included)."""
    bucket = config.get("bucket")
    if not isinstance(bucket, str) or not bucket.strip():
        raise SourceError("config.bucket: the bucket name is required")
    out = {"bucket": bucket.strip(), "prefix": str(config.get("prefix") or ""),
           "endpoint_url": str(config.get("endpoint_url") or ""), "region": str(config.get("region") or "us-east-1")}
    if out["endpoint_url"]:
        if not out["endpoint_url"].startswith(("http://", "https://")):
            raise SourceError("config.endpoint_url: must start with http:// or https://")
        (policy or OutboundPolicy.from_settings()).check_url(out["endpoint_url"], "config.endpoint_url")
    return out


def credential_origin(config: dict) -> tuple:
    """What the source's credentials are bound to: the endpoint's scheme, host and port, and the bucket."""
    endpoint = str(config.get("endpoint_url") or "")
    return (url_origin(endpoint) if endpoint else ("", "", 0)), str(config.get("bucket") or "").strip()


def check_secret(secret: dict) -> dict:
    keys = {"access_key_id", "secret_access_key"}
    if not secret:
        return {}
    if set(secret) != keys or not all(isinstance(secret[k], str) and secret[k] for k in keys):
        raise SourceError("credentials: give both access_key_id and secret_access_key")
    return {k: secret[k] for k in keys}


def _client(config: dict, secret: dict, policy: OutboundPolicy):
    # boto3 (~0.2 s to import) loads only when an S3 source is listed or fetched.
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    from botocore.exceptions import HTTPClientError

    if config.get("endpoint_url"):
        policy.check_url(config["endpoint_url"], "config.endpoint_url")
    client_config = Config(connect_timeout=_TIMEOUT, read_timeout=_TIMEOUT, retries={"max_attempts": 3})
    if not secret:
        client_config = client_config.merge(Config(signature_version=UNSIGNED))
    client = boto3.session.Session().client(
        "s3", endpoint_url=config.get("endpoint_url") or None, region_name=config.get("region") or "us-east-1",
        aws_access_key_id=secret.get("access_key_id"), aws_secret_access_key=secret.get("secret_access_key"),
        config=client_config)
    session = _policy_session(policy)

    def send(request: Any, **_: Any) -> Any:
        try:
            return session.send(request)
        except HTTPClientError as exc:  # botocore wraps what urllib3 raised: a refusal is final, not retried
            cause = exc.kwargs.get("error")
            if isinstance(cause, OutboundRefused):
                raise cause from None
            raise

    # botocore's hook for replacing the send: a before-send handler that returns the response.
    client.meta.events.register("before-send.s3", send)
    return client


def _policy_session(policy: OutboundPolicy) -> Any:
    """A botocore HTTP session whose urllib3 connections resolve the host through `policy`, check
    every address and connect to a checked one (TLS still verifies the host name)."""
    # botocore (with boto3, ~0.2 s) loads only when an S3 source is listed or fetched.
    from botocore.awsrequest import AWSHTTPConnection, AWSHTTPConnectionPool, AWSHTTPSConnection, AWSHTTPSConnectionPool
    from botocore.httpsession import URLLib3Session
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
    from urllib3.util.connection import create_connection

    def new_conn(conn: Any) -> socket.socket:
        failure = ""
        for addr in policy.addresses(conn.host, conn.port):
            try:
                return create_connection((addr, conn.port), conn.timeout, source_address=conn.source_address,
                                         socket_options=conn.socket_options)
            except TimeoutError:
                raise ConnectTimeoutError(conn, f"connection to {conn.host} timed out") from None
            except OSError as exc:  # unreachable address: try the next checked one
                failure = str(exc)
        raise NewConnectionError(conn, f"failed to establish a new connection: {failure}")

    http = type("PolicyHTTPConnection", (AWSHTTPConnection,), {"_new_conn": new_conn})
    https = type("PolicyHTTPSConnection", (AWSHTTPSConnection,), {"_new_conn": new_conn})
    session = URLLib3Session(timeout=_TIMEOUT, proxies={})  # connect and read; no proxy hides the destination
    # The pool classes of urllib3's PoolManager, set the way URLLib3Session itself sets them.
    session._manager.pool_classes_by_scheme = {  # type: ignore[attr-defined]
        "http": type("PolicyHTTPConnectionPool", (AWSHTTPConnectionPool,), {"ConnectionCls": http}),
        "https": type("PolicyHTTPSConnectionPool", (AWSHTTPSConnectionPool,), {"ConnectionCls": https}),
    }
    return session


class S3Listing:
    """The bucket's objects under the prefix. `policy` decides where connections may go (default: from settings)."""

    def __init__(self, config: dict, secret: dict, policy: OutboundPolicy | None = None) -> None:
        self.config = config
        self.client = _client(config, secret, policy or OutboundPolicy.from_settings())
        self.complete = False

    def __iter__(self) -> Iterator[Entry]:
        from botocore.exceptions import BotoCoreError, ClientError  # boto3: only for S3 sources

        bucket, prefix = self.config["bucket"], self.config.get("prefix", "")
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj["Key"]
                    if key.endswith("/"):
                        continue
                    rel = key[len(prefix):]
                    if obj["Size"] > product_settings.MAX_UPLOAD_BYTES:
                        yield Entry(key=rel, signature=obj["ETag"].strip('"'), size=obj["Size"], fetch=_nothing,
                                    error=f"{obj['Size']} bytes; the limit is {product_settings.MAX_UPLOAD_BYTES} bytes")
                        continue
                    yield Entry(key=rel, signature=obj["ETag"].strip('"'), size=obj["Size"], fetch=self._reader(bucket, key))
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            raise SourceError(f"bucket {bucket!r}: {code}") from None
        except BotoCoreError as exc:
            raise SourceError(f"bucket {bucket!r}: {type(exc).__name__}") from None
        self.complete = True

    def _reader(self, bucket: str, key: str):
        def fetch() -> bytes:
            from botocore.exceptions import BotoCoreError, ClientError  # boto3: only for S3 sources

            try:
                body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
                data = body.read(product_settings.MAX_UPLOAD_BYTES + 1)
            except OutboundRefused as exc:
                raise ItemError(str(exc)) from None
            except (ClientError, BotoCoreError) as exc:
                raise ItemError(f"cannot read object: {type(exc).__name__}") from None
            if len(data) > product_settings.MAX_UPLOAD_BYTES:
                raise ItemError(f"larger than {product_settings.MAX_UPLOAD_BYTES} bytes")
            return data
        return fetch


def _nothing() -> bytes:
    raise ItemError("not readable")
