"""The answer cache (agents.answer_cache) over real PostgreSQL and real Redis: a repeat is a hit that is
still a chained run; every change of scope, corpus, provider, prompts, strategy, budgets or switch is a
miss; a hit re-verifies its citations for the caller; a Redis that is down means no cache, never an error."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from agents import answer_cache, prompts
from agents.chain import verify_tenant_chain
from agents.conversations import send_message, start_conversation
from agents.models import Run
from agents.providers.offline import OfflineProvider
from agents.selectors import run_citations, run_steps
from agents.services import ask
from kb.ingest.documents import move_document
from kb.models import Chunk, Document
from tenants.conf import product_settings
from tenants.scope import Scope, activate
from tenants.tenant_settings import for_tenant
from tests.agents.conftest import TRAVEL, add_chunk, hash_corpus
from tests.factories import department, dept_scope, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

QUESTION = "Which travel costs can be claimed when a business trip is extended with personal days?"
TTL = 600


def cache_on(tenant, **settings) -> None:
    tenant.settings = {"answer_cache_ttl_seconds": TTL, **settings}
    with activate(whole_tenant(tenant)):  # only the tenant itself may change its row (RLS)
        tenant.save(update_fields=["settings"])


@pytest.fixture
def cached(acme):
    """acme with the answer cache on, and its first fresh, answered run for QUESTION from Engineering."""
    if not product_settings.ANSWER_CACHE_REDIS_URL:
        pytest.skip("no Redis configured (REDIS_URL / ANSWER_CACHE_REDIS_URL)")
    tenant, corpus, chunks = acme
    cache_on(tenant)
    scope = dept_scope(tenant, "Engineering")
    first = ask(scope=scope, question=QUESTION, strategy="classic", provider="offline")
    assert first.outcome == "answered" and first.grounded, first.answer
    assert first.cached_from_run_id is None
    return tenant, corpus, chunks, scope, first


def test_identical_repeat_is_a_hit_that_is_still_a_chained_run(cached):
    tenant, _, _, scope, first = cached
    events: list = []
    again = ask(scope=scope, question="  which TRAVEL costs can be claimed when a business trip is extended with personal days ?! ",
                strategy="classic", provider="offline", on_step=events.append)
    assert again.pk != first.pk and again.seq == first.seq + 1
    assert (again.cached_from_run_id, again.cached_from_hash) == (first.pk, first.hash)
    assert (again.answer, again.outcome, again.grounded, again.missing) == (first.answer, first.outcome, first.grounded, first.missing)
    assert again.input_tokens == again.output_tokens == again.tool_calls == 0
    with activate(scope):
        steps = run_steps(scope, again.pk)
        old, new = run_citations(scope, first.pk), run_citations(scope, again.pk)
    assert [s.name for s in steps] == ["answer_cache"] and steps[0].cached and steps[0].arguments["run_id"] == first.pk
    assert [e.name for e in events] == ["answer_cache"]
    assert [(c.chunk_id, c.content_hash, c.quoted_text, c.verdict) for c in new] == [
        (c.chunk_id, c.content_hash, c.quoted_text, c.verdict) for c in old]
    with activate(whole_tenant(tenant)):
        report = verify_tenant_chain(tenant.id, using="default")
    assert report.ok and report.runs_checked == 2
    third = ask(scope=scope, question=QUESTION, strategy="classic", provider="offline")
    assert third.cached_from_run_id == first.pk  # a hit always names the run that was answered, never another hit


@dataclass(frozen=True)
class Change:
    """One change between the first run and the repeat; `apply(world)` returns the repeat's ask() arguments."""

    name: str
    apply: Callable[[dict], dict]


def _other_tenant(w):
    other = make_tenant("Globex")
    cache_on(other)
    corpus = hash_corpus(other, "Policies")
    for text in ("When a business trip is extended with personal days, only the travel costs of the business part can be claimed.",):
        add_chunk(corpus, text, "Travel and Expense Policy")
    return {"scope": Scope(tenant_id=other.id, department_ids=frozenset(), principal="test")}


def _new_document(w):
    add_chunk(w["corpus"], "Taxi fares to the airport are reimbursed on business trips.", "Taxi Policy")
    return {}


def _moved_document(w):
    scope = whole_tenant(w["tenant"])
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(title="Leave Policy")
    move_document(scope=scope, document=doc, department_id=department(w["tenant"], "Sales").pk)
    return {}


def _other_model(w):
    provider = OfflineProvider()
    provider.model = "extractive-v3"
    return {"provider": provider}


def _other_prompts(w):
    w["monkeypatch"].setattr(prompts, "PROMPT_VERSION", prompts.PROMPT_VERSION + "-next")
    return {}


def _tenant_setting(**settings):
    def apply(w):
        cache_on(w["tenant"], **settings)
        return {}
    return apply


MISSES = [
    Change("another tenant asks the same question", _other_tenant),
    Change("another department set", lambda w: {"scope": dept_scope(w["tenant"], "Engineering", "Sales")}),
    Change("the whole tenant instead of a department", lambda w: {"scope": whole_tenant(w["tenant"], role="reader")}),
    Change("narrowed to a corpus", lambda w: {"corpus_ids": [w["corpus"].pk]}),
    Change("a document ingested into the corpus", _new_document),
    Change("a document moved to another department", _moved_document),
    Change("another model of the provider", _other_model),
    Change("another prompt version", _other_prompts),
    Change("another strategy", lambda w: {"strategy": "pipeline"}),
    Change("other run budgets (strict citations)", _tenant_setting(strict_citations=True)),
    Change("the request turns the cache off", lambda w: {"use_cache": False}),
    Change("the tenant's TTL is 0", _tenant_setting(answer_cache_ttl_seconds=0)),
]


@pytest.mark.parametrize("change", MISSES, ids=[c.name for c in MISSES])
def test_every_change_is_a_miss(cached, change, monkeypatch):
    tenant, corpus, _, scope, first = cached
    kwargs = {"scope": scope, "question": QUESTION, "strategy": "classic", "provider": "offline",
              **change.apply({"tenant": tenant, "corpus": corpus, "monkeypatch": monkeypatch})}
    again = ask(**kwargs)
    assert again.cached_from_run_id is None and again.cached_from_hash == ""
    with activate(kwargs["scope"]):
        assert [s.name for s in run_steps(kwargs["scope"], again.pk)] != ["answer_cache"]


def test_a_conversations_first_turn_is_cached_its_follow_ups_never(cached):
    tenant, _, _, scope, first = cached
    conversation = start_conversation(scope=scope)
    opening = send_message(scope=scope, conversation_id=conversation.id, message=QUESTION, strategy="classic", provider="offline")
    assert (opening.conversation_id, opening.turn, opening.cached_from_run_id) == (conversation.id, 1, first.pk)
    follow_up = send_message(scope=scope, conversation_id=conversation.id, message=QUESTION, strategy="classic", provider="offline")
    assert follow_up.turn == 2 and follow_up.cached_from_run_id is None
    # A first turn answered afresh fills the cache for plain questions as well.
    other = "How many days of annual leave do employees get?"
    fresh = send_message(scope=scope, conversation_id=start_conversation(scope=scope).id, message=other, strategy="classic",
                         provider="offline")
    assert fresh.cached_from_run_id is None and fresh.outcome == "answered"
    assert ask(scope=scope, question=other, strategy="classic", provider="offline").cached_from_run_id == fresh.pk


def test_a_change_that_keeps_the_version_is_caught_by_re_verifying_the_citations(cached):
    """A cited chunk moved out of the caller's departments without its document changing (no writer does
    that; the check does not rely on it): the hit is refused and the question runs again."""
    tenant, _, _, scope, first = cached
    whole = whole_tenant(tenant)
    with activate(whole):
        cited = [c.chunk_id for c in run_citations(whole, first.pk)]
        Chunk.objects.for_scope(whole).filter(pk__in=cited).update(department_id=department(tenant, "Sales").pk)
    again = ask(scope=scope, question=QUESTION, strategy="classic", provider="offline")
    assert again.cached_from_run_id is None
    with activate(scope):
        assert not set(cited) & {c.chunk_id for c in run_citations(scope, again.pk)}
    # A caller who still sees them (the whole tenant) has a key of its own: its own first run, then hits.
    mine = ask(scope=whole, question=QUESTION, strategy="classic", provider="offline")
    assert ask(scope=whole, question=QUESTION, strategy="classic", provider="offline").cached_from_run_id == mine.pk


def test_a_changed_chunk_text_is_a_miss(cached):
    tenant, _, _, scope, first = cached
    whole = whole_tenant(tenant)
    with activate(whole):
        cited = run_citations(whole, first.pk)[0].chunk_id
        Chunk.objects.for_scope(whole).filter(pk=cited).update(content_hash="0" * 64)
    assert ask(scope=scope, question=QUESTION, strategy="classic", provider="offline").cached_from_run_id is None


def test_another_tenant_never_gets_the_answer_even_through_a_forged_pointer(cached):
    """Tenant B asks A's exact question: a miss. Even when Redis is made to point B's key at A's run,
    B's scope cannot read that run (RLS and agents.access): still a miss, never A's answer."""
    tenant, _, _, scope, first = cached
    other = make_tenant("Initech")
    cache_on(other)
    add_chunk(hash_corpus(other, "Policies"), TRAVEL[2], "Travel and Expense Policy")  # the same text: its own answer
    b_scope = Scope(tenant_id=other.id, department_ids=frozenset(), principal="test")
    b_first = ask(scope=b_scope, question=QUESTION, strategy="classic", provider="offline")
    assert b_first.outcome == "answered" and b_first.cached_from_run_id is None and b_first.answer != first.answer
    redis = answer_cache._client(product_settings.ANSWER_CACHE_REDIS_URL)
    key = key_of(b_scope)
    assert json.loads(redis.get(key.redis_key)) == {"run": b_first.pk, "hash": b_first.hash}  # the key ask() uses
    redis.set(key.redis_key, json.dumps({"run": first.pk, "hash": first.hash}))
    forged = ask(scope=b_scope, question=QUESTION, strategy="classic", provider="offline")
    assert forged.cached_from_run_id is None and forged.answer != first.answer
    with activate(b_scope):
        assert not Run.objects.for_scope(b_scope).filter(pk=first.pk).exists()


def test_a_pointer_to_a_run_of_another_question_is_refused(cached):
    tenant, _, _, scope, first = cached
    other = ask(scope=scope, question="How many days of annual leave do employees get?", strategy="classic", provider="offline")
    redis = answer_cache._client(product_settings.ANSWER_CACHE_REDIS_URL)
    key = key_of(scope)
    assert json.loads(redis.get(key.redis_key)) == {"run": first.pk, "hash": first.hash}  # the key ask() uses
    redis.set(key.redis_key, json.dumps({"run": other.pk, "hash": other.hash}))
    assert ask(scope=scope, question=QUESTION, strategy="classic", provider="offline").cached_from_run_id is None


def test_redis_down_answers_uncached_without_error(acme, settings, caplog):
    tenant, _, _ = acme
    cache_on(tenant)
    settings.ANSWER_CACHE_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    scope = dept_scope(tenant, "Engineering")
    with caplog.at_level(logging.WARNING, logger="agents.answer_cache"):
        runs = [ask(scope=scope, question=QUESTION, strategy="classic", provider="offline") for _ in range(2)]
    assert all(r.outcome == "answered" and r.cached_from_run_id is None for r in runs)
    assert sum("answer cache Redis unavailable" in r.getMessage() for r in caplog.records) <= 1


def test_no_redis_configured_means_no_cache(acme, settings):
    tenant, _, _ = acme
    cache_on(tenant)
    settings.ANSWER_CACHE_REDIS_URL = ""
    scope = dept_scope(tenant, "Engineering")
    runs = [ask(scope=scope, question=QUESTION, strategy="classic", provider="offline") for _ in range(2)]
    assert [r.cached_from_run_id for r in runs] == [None, None]


def key_of(scope: Scope) -> answer_cache.AnswerKey:
    key = answer_cache.answer_key(scope=scope, question=QUESTION, strategy="classic", provider=OfflineProvider(),
                                  budgets=for_tenant(scope.tenant_id).budgets, corpus_ids=None)
    assert key is not None
    return key


@pytest.mark.parametrize(("raw", "normalised"), [
    ("  What is  the Hotel limit?? ", "what is the hotel limit"),
    ("Was kostet ein Hotel…", "was kostet ein hotel"),
    ("ｆｕｌｌ width?", "full width"),
    ("e.g. 3.5", "e.g. 3.5"),
])
def test_normalise_question(raw, normalised):
    assert answer_cache.normalise_question(raw) == normalised
