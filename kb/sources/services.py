"""Adding, changing, pausing and deleting sources; checked by kb.access (same roles as corpora)."""

from __future__ import annotations

from collections.abc import Callable

from django.db import IntegrityError, transaction

from kb import access
from kb.metadata import json_problem, text_problem
from kb.models import Corpus
from kb.sources import folder, s3, website
from kb.sources.base import SourceError
from kb.sources.crypto import encrypt_secret
from kb.sources.grants import check_granted, outbound_policy_for
from kb.sources.models import Source, SourceKind
from kb.sources.rules import normalise_rules
from kb.sources.sync import request_sync
from tenants.access import departments_in_scope
from tenants.scope import NotAllowed, Scope, activate

# Keyed by the kind's stored string (SourceKind members are those strings).
_CHECKS: dict[str, Callable[..., dict]] = {
    SourceKind.FOLDER: folder.check_config, SourceKind.S3: s3.check_config, SourceKind.WEBSITE: website.check_config,
}
_NETWORK_KINDS = (SourceKind.S3, SourceKind.WEBSITE)
MAX_SCHEDULE_MINUTES = 60 * 24 * 31


def check_source_config(kind: str, config: object, *, tenant_id: int) -> dict:
    """The clean config of a `kind` source of `tenant_id`: the kind's own checks, then the tenant's
    grants (kb.sources.grants: a folder under its folder grants, a host among its granted hosts).
    Raises NotAllowed on field "config" naming the config key at fault."""
    if kind not in _CHECKS:
        raise NotAllowed(f"kind must be one of {', '.join(SourceKind.values)}", field="kind")
    if not isinstance(config, dict):
        raise NotAllowed("config must be an object", field="config")
    if problem := json_problem(config, max_depth=3, max_string=2000, check_text=True):
        raise NotAllowed(f"config: {problem}", field="config")
    try:
        # Network kinds check addresses under the tenant's policy (its granted private hosts pass).
        network = {"policy": outbound_policy_for(tenant_id, kind)} if kind in _NETWORK_KINDS else {}
        clean = _CHECKS[kind](config, **network)
        check_granted(tenant_id, kind, clean)
        return clean
    except SourceError as exc:
        raise NotAllowed(str(exc), field="config") from None
    except (ValueError, UnicodeError):  # a malformed URL or path
        raise NotAllowed("config: a malformed URL or path", field="config") from None


def check_source_secret(kind: str, secret: object) -> dict:
    if secret in (None, {}):
        return {}
    if not isinstance(secret, dict) or not all(isinstance(v, str) for v in secret.values()):
        raise NotAllowed("credentials must be an object of strings", field="credentials")
    if json_problem(secret, max_depth=2, max_string=4000, check_text=True):
        raise NotAllowed("credentials: strings of at most 4000 characters, no NUL", field="credentials")
    try:
        if kind == SourceKind.S3:
            return s3.check_secret(secret)
        if kind == SourceKind.WEBSITE and set(secret) <= {"authorization"}:
            return dict(secret)
    except SourceError as exc:
        raise NotAllowed(str(exc), field="credentials") from None
    raise NotAllowed(f"a {kind} source takes no such credentials", field="credentials")


def check_source_rules(scope: Scope, corpus: Corpus, rules: object) -> list[dict]:
    """The normalised department rules of a source of `corpus`: well formed, every department visible to `scope`
    and one it may place documents in (kb.access). Raises NotAllowed on field "department_rules"."""
    if problem := json_problem(rules, max_depth=3, max_string=1000, check_text=True):
        raise NotAllowed(f"department rules: {problem}", field="department_rules")
    if isinstance(rules, list) and len(rules) > 200:
        raise NotAllowed("at most 200 department rules", field="department_rules")
    try:
        normalised = normalise_rules(rules)
    except ValueError as exc:
        raise NotAllowed(str(exc), field="department_rules") from None
    wanted = {r["department"] for r in normalised}
    try:
        departments_in_scope(scope, sorted(wanted - {None}))
    except NotAllowed as exc:
        raise NotAllowed(f"department rules: {exc}", field="department_rules") from None
    access.check_may_manage_source(scope, corpus, wanted)
    return normalised


def source_create(*, scope: Scope, corpus: Corpus, name: str, kind: str, config: dict, credentials: dict | None = None,
                  department_rules: list | None = None, schedule_minutes: int = 60, paused: bool = False,
                  first_sync: bool = False) -> Source:
    """A new source of `corpus` (checked: role, corpus, rules, config). Credentials are encrypted here
    and never returned. `first_sync`: an unpaused source's first sync is queued at once, in the same
    transaction ("sync now" after commit: kb.sources.sync.request_sync), rather than at the next scheduler pass."""
    with activate(scope):
        source = _create(scope=scope, corpus=corpus, name=name, kind=kind, config=config, credentials=credentials,
                         department_rules=department_rules, schedule_minutes=schedule_minutes, paused=paused)
        if first_sync and not source.paused:
            request_sync(scope=scope, source=source)
            source = Source.objects.for_scope(scope).get(pk=source.pk)  # with the next_sync_at request_sync set
        return source


def _create(*, scope: Scope, corpus: Corpus, name: str, kind: str, config: dict, credentials: dict | None,
            department_rules: list | None, schedule_minutes: int, paused: bool) -> Source:
    with activate(scope):
        access.check_may_manage_source(scope, corpus, set())
        name = (name or "").strip()
        if not name or len(name) > 200 or text_problem(name):
            raise NotAllowed("a name of 1 to 200 characters is required", field="name")
        _check_schedule(schedule_minutes)
        clean = check_source_config(kind, config, tenant_id=scope.tenant_id)
        secret = check_source_secret(kind, credentials)
        rules = check_source_rules(scope, corpus, department_rules)
        try:
            with transaction.atomic():
                return Source.objects.create(tenant_id=scope.tenant_id, corpus=corpus, name=name, kind=kind, config=clean,
                                             secret=encrypt_secret(secret), department_rules=rules,
                                             schedule_minutes=schedule_minutes, paused=paused,
                                             created_by=scope.principal[:200])
        except IntegrityError:
            raise NotAllowed("a source with this name already exists", field="name") from None


_UNCHANGED = object()


def source_update(*, scope: Scope, source: Source, name: object = _UNCHANGED, config: object = _UNCHANGED,
                  credentials: object = _UNCHANGED, department_rules: object = _UNCHANGED,
                  schedule_minutes: object = _UNCHANGED, paused: object = _UNCHANGED) -> Source:
    """Change a source; only the fields given. New credentials replace the old ones (an empty
    object removes them); a config whose origin changes (credential_origin) drops the stored
    credentials unless new ones come with it; rule changes move documents on the next sync."""
    with activate(scope):
        locked = Source.objects.for_scope(scope).select_for_update().select_related("corpus").get(pk=source.pk)
        access.check_may_manage_source(scope, locked.corpus, {r["department"] for r in locked.department_rules or []})
        if name is not _UNCHANGED:
            name = str(name or "").strip()
            if not name or len(name) > 200 or text_problem(name):
                raise NotAllowed("a name of 1 to 200 characters is required", field="name")
            locked.name = name
        if config is not _UNCHANGED:
            clean = check_source_config(locked.kind, config, tenant_id=scope.tenant_id)
            if credentials is _UNCHANGED and credential_origin(locked.kind, locked.config) != credential_origin(locked.kind, clean):
                credentials = {}  # stored credentials are bound to the origin they were given for
            locked.config = clean
        if credentials is not _UNCHANGED:
            locked.secret = encrypt_secret(check_source_secret(locked.kind, credentials))
        if department_rules is not _UNCHANGED:
            locked.department_rules = check_source_rules(scope, locked.corpus, department_rules)
        if schedule_minutes is not _UNCHANGED:
            _check_schedule(schedule_minutes)
            locked.schedule_minutes = schedule_minutes
            locked.next_sync_at = None  # due at the next scheduler pass, then every schedule_minutes
        if paused is not _UNCHANGED:
            locked.paused = bool(paused)
        try:
            with transaction.atomic():
                locked.save()
        except IntegrityError:
            raise NotAllowed("a source with this name already exists", field="name") from None
        return locked


def credential_origin(kind: str, config: dict) -> tuple:
    """What a source's credentials are bound to (website: the start URL's scheme, host and port; S3:
    the endpoint's and the bucket). A change of it drops the stored credentials."""
    origins: dict[str, Callable[[dict], tuple]] = {SourceKind.S3: s3.credential_origin,
                                                  SourceKind.WEBSITE: website.credential_origin}
    return origins[kind](config) if kind in origins else ()


def source_delete(*, scope: Scope, source: Source) -> None:
    """Delete a source and its sync history. Its documents stay in the corpus (delete them, or
    remove the items upstream and sync, to take them out)."""
    with activate(scope):
        locked = Source.objects.for_scope(scope).select_for_update().select_related("corpus").get(pk=source.pk)
        access.check_may_manage_source(scope, locked.corpus, {r["department"] for r in locked.department_rules or []})
        locked.delete()


def _check_schedule(minutes: object) -> None:
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 <= minutes <= MAX_SCHEDULE_MINUTES:
        raise NotAllowed(f"schedule_minutes must be a whole number from 0 to {MAX_SCHEDULE_MINUTES}", field="schedule_minutes")
