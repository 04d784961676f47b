"""Who may see a tenant's agent runs, their steps and citations. The one home of these rules
(tenants.access states the conventions); the API, the admin's audit review and the tools use them.

Runs are read by auditors and admins. A department-limited caller sees only runs that were
themselves confined to departments it can see: a whole-tenant run may have read any department, so
its question, steps and answer are not for a department's eyes. Steps and citations follow their run.
Runs are append-only: nobody changes them (the database refuses it as well; agents.chain).

Feedback is given by the principal that asked, on its own runs (`access_own_run`); it is read, like
the runs it is about, by auditors and admins.

Conversations belong to the principal that started them: only that principal (the same user, or the
same key) sees and continues one, and not once its owner deleted (hid) it. Auditors read a
conversation's turns as runs.
"""

from __future__ import annotations

from django.db.models import QuerySet

from agents.models import Citation, Conversation, Feedback, Run, RunStep
from tenants.access import follows_parent, one, role_check, visibility_rule
from tenants.scope import Scope

AUDITORS = frozenset({"auditor", "admin", "system"})
ASKERS = frozenset({"reader", "editor", "admin", "system"})


@visibility_rule(Run)
def visible_runs(scope: Scope) -> QuerySet:
    qs = Run.objects.for_scope(scope)
    if not scope.all_departments:
        qs = qs.filter(scope__all_departments=False, scope__department_ids__contained_by=sorted(scope.department_ids))
    return qs


# Steps and citations follow their run (tenants.access.follows_parent).
visible_run_steps = follows_parent(RunStep, "run", visible_runs)
visible_citations = follows_parent(Citation, "run", visible_runs)


def access_run(scope: Scope, run_id: object) -> Run:
    return one(visible_runs(scope), run_id, "run")


check_may_audit = role_check(AUDITORS, "your role does not allow reading runs")
check_may_ask = role_check(ASKERS, "your role does not allow asking")


@visibility_rule(Conversation)
def visible_conversations(scope: Scope) -> QuerySet:
    """The caller's own conversations that it has not deleted."""
    return Conversation.objects.for_scope(scope).filter(principal=scope.principal, hidden_at__isnull=True)


def access_conversation(scope: Scope, conversation_id: object) -> Conversation:
    return one(visible_conversations(scope), conversation_id, "conversation")


def access_own_run(scope: Scope, run_id: object) -> Run:
    """One of the runs the caller itself asked (for feedback on its answer); NotVisible otherwise."""
    return one(Run.objects.for_scope(scope).filter(principal=scope.principal), run_id, "run")

visible_feedback = follows_parent(Feedback, "run", visible_runs)
