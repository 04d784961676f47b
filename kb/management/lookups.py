"""What the corpus commands look up from their arguments: a tenant by slug (as a system scope naming the
command) and a corpus of it by name, each a CommandError naming what is missing."""

from __future__ import annotations

from django.core.management.base import CommandError

from kb.models import Corpus
from tenants.models import Tenant
from tenants.scope import Scope, activate


def tenant_scope(slug: str, command: str) -> Scope:
    """The system scope of the tenant `slug`, its principal "manage.py <command>"."""
    found = Tenant.objects.filter(slug=slug).first()
    if found is None:
        raise CommandError(f"no tenant with slug {slug!r}")
    return Scope.system(found.id, principal=f"manage.py {command}")


def corpus_named(scope: Scope, slug: str, name: str) -> Corpus:
    """The corpus called `name` in `scope`'s tenant (whose slug is `slug`, for the message)."""
    with activate(scope):
        target = Corpus.objects.for_scope(scope).filter(name=name).first()
    if target is None:
        raise CommandError(f"tenant {slug!r} has no corpus {name!r}")
    return target
