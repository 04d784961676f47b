"""Audit review, shared by the API's runs (api.views.agents) and the admin (agents.admin): text search
over questions and answers, the answer cache's hit rate and latencies, and principals shown by name ('key:<public id>' is the key's name,
'user:<id>' the member's username as the tenant knows it, and the playground's
'<theirs> via admin:user:<id>' names both)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db.models import Aggregate, Count, FloatField, Q, QuerySet

from tenants.models import ApiKey, Membership, Tenant, TenantUser
from tenants.services import display_name

_TOKEN = re.compile(r"\b(user|key):([0-9A-Za-z]{1,32})\b")


def search_runs(qs: QuerySet, q: str) -> QuerySet:
    """Runs whose question or answer matches `q`: full-text (English stemming, web-search syntax:
    "quoted phrases", or, -not) or a plain substring, so ids and codes are found as typed."""
    document = SearchVector("question", "answer", config="english")
    query = SearchQuery(q, config="english", search_type="websearch")
    return qs.annotate(text_match=document).filter(Q(text_match=query) | Q(question__icontains=q) | Q(answer__icontains=q))


class Median(Aggregate):
    """PostgreSQL's continuous median of a column (percentile_cont(0.5))."""

    function = "percentile_cont"
    template = "%(function)s(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()


def cache_summary(runs: QuerySet) -> dict:
    """Of `runs`: how many there are, how many the answer cache served (agents.answer_cache), and the median
    latency (ms, None without such runs) of those served from the cache and of those answered afresh."""
    hit = Q(cached_from_run_id__isnull=False)
    found = runs.order_by().aggregate(runs=Count("pk"), hits=Count("pk", filter=hit), hit_ms=Median("latency_ms", filter=hit),
                                      miss_ms=Median("latency_ms", filter=~hit))
    found["hit_rate"] = found["hits"] / found["runs"] if found["runs"] else None
    return found


def principal_names(tenant_id: int, principals: Iterable[str], *, using: str = "default") -> dict[str, str]:
    """{principal: readable form} for principals of one tenant's runs, each `user:`/`key:` token
    replaced by '<name> (user)' / '<name> (key)'; a token whose user or key is not found stays as it
    is. On the application connection it must run inside `activate` of that tenant (row-level security)."""
    principals = set(principals)
    tokens = {m.groups() for p in principals for m in _TOKEN.finditer(p)}
    names: dict[str, str] = {}
    key_ids = {value for kind, value in tokens if kind == "key"}
    if key_ids:
        for public_id, name in ApiKey.objects.using(using).filter(tenant_id=tenant_id, public_id__in=key_ids).values_list(
                "public_id", "name"):
            names[f"key:{public_id}"] = f"{name} (key)"
    user_ids = {int(value) for kind, value in tokens if kind == "user" and value.isdigit() and len(value) < 19}
    if user_ids:
        slug = Tenant.objects.using(using).filter(pk=tenant_id).values_list("slug", flat=True).first() or ""
        users = {m.user_id: m.user for m in Membership.objects.using(using).filter(tenant_id=tenant_id, user_id__in=user_ids)
                 .select_related("user")}
        for home in TenantUser.objects.using(using).filter(tenant_id=tenant_id, user_id__in=user_ids - set(users)).select_related("user"):
            users[home.user_id] = home.user
        for user_id, user in users.items():
            names[f"user:{user_id}"] = f"{display_name(user, slug)} (user)"
    return {p: _TOKEN.sub(lambda m: names.get(m.group(0), m.group(0)), p) for p in principals}
