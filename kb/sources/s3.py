"""S3-compatible bucket source (AWS S3, MinIO, Ceph, R2, ...) through boto3. Signature: the ETag, so
an unchanged object is never downloaded.

config: {"bucket": "policies", "prefix": "handbook/", "endpoint_url": "https://minio.example:9000",
         "region": "us-east-1"}
secret: {"access_key_id": "...", "secret_access_key": "..."} (optional: anonymous access without)
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings

from kb.sources.base import Entry, ItemError, SourceError, check_public_host

_TIMEOUT = 30


def check_config(config: dict) -> dict:
    bucket = config.get("bucket")
    if not isinstance(bucket, str) or not bucket.strip():
        raise SourceError("config.bucket: the bucket name is required")
    out = {"bucket": bucket.strip(), "prefix": str(config.get("prefix") or ""),
           "endpoint_url": str(config.get("endpoint_url") or ""), "region": str(config.get("region") or "us-east-1")}
    if out["endpoint_url"]:
        if not out["endpoint_url"].startswith(("http://", "https://")):
            raise SourceError("config.endpoint_url: must start with http:// or https://")
        check_public_host(out["endpoint_url"], "config.endpoint_url")
    return out


def check_secret(secret: dict) -> dict:
    keys = {"access_key_id", "secret_access_key"}
    if not secret:
        return {}
    if set(secret) != keys or not all(isinstance(secret[k], str) and secret[k] for k in keys):
        raise SourceError("credentials: give both access_key_id and secret_access_key")
    return {k: secret[k] for k in keys}


def _client(config: dict, secret: dict):
    # boto3 (~0.2 s to import) loads only when an S3 source is listed or fetched.
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    if config.get("endpoint_url"):
        check_public_host(config["endpoint_url"], "config.endpoint_url")
    client_config = Config(connect_timeout=_TIMEOUT, read_timeout=_TIMEOUT, retries={"max_attempts": 3})
    if not secret:
        client_config = client_config.merge(Config(signature_version=UNSIGNED))
    return boto3.session.Session().client(
        "s3", endpoint_url=config.get("endpoint_url") or None, region_name=config.get("region") or "us-east-1",
        aws_access_key_id=secret.get("access_key_id"), aws_secret_access_key=secret.get("secret_access_key"),
        config=client_config)


class S3Listing:
    def __init__(self, config: dict, secret: dict) -> None:
        self.config = config
        self.client = _client(config, secret)
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
                    if obj["Size"] > settings.MAX_UPLOAD_BYTES:
                        yield Entry(key=rel, signature=obj["ETag"].strip('"'), size=obj["Size"], fetch=_nothing,
                                    error=f"{obj['Size']} bytes; the limit is {settings.MAX_UPLOAD_BYTES} bytes")
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
                data = body.read(settings.MAX_UPLOAD_BYTES + 1)
            except (ClientError, BotoCoreError) as exc:
                raise ItemError(f"cannot read object: {type(exc).__name__}") from None
            if len(data) > settings.MAX_UPLOAD_BYTES:
                raise ItemError(f"larger than {settings.MAX_UPLOAD_BYTES} bytes")
            return data
        return fetch


def _nothing() -> bytes:
    raise ItemError("not readable")
