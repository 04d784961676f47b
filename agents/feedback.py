"""Feedback on answers: a thumbs up or down and an optional comment, given by the principal that
asked, stored append-only beside the run; and the counts audit review shows per corpus.

A run's corpora are those of the documents its citations name (a run confined to nothing in
particular has no corpus of its own), so feedback counts for each corpus an answer cited.
"""

from __future__ import annotations

from collections import Counter

from django.db.models import QuerySet
from django.utils import timezone

from agents.access import access_own_run, check_may_ask
from agents.chain import clean_json
from agents.models import Feedback, Rating
from tenants.scope import NotAllowed, Scope, activate

MAX_COMMENT_CHARS = 2_000


def give_feedback(*, scope: Scope, run_id: object, rating: str, comment: str = "") -> Feedback:
    """Store feedback on one of the caller's own runs. NotVisible for any other run (another
    principal's, another tenant's, a missing one); NotAllowed on `rating` or `comment` for bad values."""
    check_may_ask(scope)
    if rating not in Rating.values:
        raise NotAllowed(f"one of {', '.join(Rating.values)}", field="rating")
    comment = clean_json((comment or "").strip())
    if len(comment) > MAX_COMMENT_CHARS:
        raise NotAllowed(f"at most {MAX_COMMENT_CHARS} characters", field="comment")
    with activate(scope):
        run = access_own_run(scope, run_id)
        return Feedback.objects.create(tenant_id=scope.tenant_id, run=run, principal=scope.principal[:200], rating=rating,
                                       comment=comment, created_at=timezone.now())


def run_corpora(citations: QuerySet, documents: QuerySet, run_ids: list[int]) -> dict[int, list[str]]:
    """{run id: names of the corpora its citations' documents belong to}, from the citations and
    documents querysets the caller sees (agents.access / kb.access, or the admin's)."""
    pairs = list(citations.filter(run_id__in=run_ids, document_id__isnull=False).values_list("run_id", "document_id").distinct())
    names = dict(documents.filter(pk__in={d for _, d in pairs}).values_list("pk", "corpus__name"))
    out: dict[int, list[str]] = {}
    for run_id, document_id in pairs:
        if document_id in names and names[document_id] not in out.setdefault(run_id, []):
            out[run_id].append(names[document_id])
    return out


def feedback_per_corpus(feedback: QuerySet, citations: QuerySet, documents: QuerySet, limit: int = 20_000) -> list[dict]:
    """[{corpus, up, down}] over `feedback`, most thumbs down first, each feedback counted for every
    corpus its run cited ("(no citation)" when it cited none). The querysets are what the caller sees."""
    rows = list(feedback.order_by().values_list("run_id", "rating")[:limit])
    corpora = run_corpora(citations, documents, list({run_id for run_id, _ in rows}))
    counts: Counter = Counter()
    for run_id, rating in rows:
        for name in corpora.get(run_id) or ["(no citation)"]:
            counts[name, rating] += 1
    names = sorted({name for name, _ in counts}, key=lambda n: (-counts[n, Rating.DOWN], n))
    return [{"corpus": n, "up": counts[n, Rating.UP], "down": counts[n, Rating.DOWN]} for n in names]
