"""Run traces: one Run per question, its RunSteps (model and tool calls) and its Citations.

Written once, in one transaction with the answer (agents.trace.record_run), and never changed:
DB triggers reject UPDATE and DELETE, the application role has no UPDATE/DELETE/TRUNCATE on these
tables, and each tenant's runs form a hash chain (agents.chain) so a changed byte is detectable.

Audit rows hold chunk/document ids as plain integers, not foreign keys: re-ingesting or deleting
a document must neither cascade into the audit trail nor be blocked by it.

Keyed by tenant in the database (agents 0010, tenants.tenant_keys): primary keys (tenant_id, id), unique
constraints starting with the tenant, and the foreign keys between these tables (`db_constraint=False` here)
as (tenant_id, x_id) -> (tenant_id, id). No row or hash changed with it.
"""

from __future__ import annotations

from django.db import models

from tenants.models import Department, Tenant
from tenants.scope import TenantScopedManager
from tenants.tenant_models import TenantModel


class Outcome(models.TextChoices):
    """What a run produced (agents.loop.decide_outcome; `withheld` by agents.services)."""

    ANSWERED = "answered"  # grounded: at least one citation, every one verified
    NOT_ENOUGH_EVIDENCE = "not_enough_evidence"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"  # grounded, but a budget ended the research early
    TRUNCATED = "truncated"  # the answer was cut off by the output cap (even after its retry): text kept, never complete
    UNVERIFIED = "unverified"  # text returned, but not grounded (no citation, or one that failed verification)
    WITHHELD = "withheld"  # unverified or truncated text not shown: the tenant asked for strict citations


class StepKind(models.TextChoices):
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"


class Verdict(models.TextChoices):
    VERIFIED = "verified"
    QUOTE_MISMATCH = "quote_mismatch"  # the chunk was retrieved, the quoted words are not in it
    NOT_RETRIEVED = "not_retrieved"  # the id was not among the chunks this run retrieved
    UNSUPPORTED = "unsupported"  # retrieved, but the claim shares almost no terms with it


class Rating(models.TextChoices):
    """A Feedback's thumbs up or down."""

    UP = "up"
    DOWN = "down"


class Conversation(TenantModel):
    """A thread of questions by one principal (a user or a key); each turn is a Run linked to it.

    Owned by its principal: only the same principal, in the same tenant, sees it (agents.access).
    Not part of the audit trail itself, so it may change (title, updated_at) and be hidden by its
    owner (`hidden_at`); its runs stay, append-only and chained."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    principal = models.CharField(max_length=200, help_text="'user:<id>' or 'key:<public id>': the owner.")
    title = models.CharField(max_length=200, blank=True)
    turns = models.PositiveIntegerField(default=0, help_text="Turns asked so far (the last run's turn number).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    hidden_at = models.DateTimeField(null=True, blank=True, help_text="Deleted by its owner: hidden, its runs kept.")

    objects = TenantScopedManager()

    class Meta:
        indexes = [models.Index(fields=["tenant", "principal", "-updated_at"], name="conv_owner_recent_idx")]

    def __str__(self) -> str:
        return f"conversation {self.pk}"


class Run(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    seq = models.PositiveBigIntegerField(help_text="Position in the tenant's hash chain, from 1.")
    principal = models.CharField(max_length=200, help_text="'user:<id>' or 'key:<public id>'.")
    scope = models.JSONField(help_text="The scope the run was confined to (Scope.as_dict()).")
    question = models.TextField()
    strategy_requested = models.CharField(max_length=16)
    strategy = models.CharField(max_length=16, help_text="The strategy that produced the answer.")
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=32)
    budgets = models.JSONField(default=dict)
    answer = models.TextField(blank=True)
    outcome = models.CharField(max_length=24, choices=Outcome.choices)
    grounded = models.BooleanField(default=False)
    strict = models.BooleanField(default=False)
    missing = models.JSONField(default=list, help_text="Parts of the question no evidence was found for.")
    error = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    # A conversation turn: its thread, its number there (from 1) and what the caller typed (`question`
    # is then the standalone question it was rewritten into). Chained like every column, but left out
    # of the hash while empty, so runs stored before these columns existed still verify (agents.chain).
    conversation = models.ForeignKey(Conversation, null=True, blank=True, on_delete=models.PROTECT, related_name="runs",
                                     db_constraint=False)
    turn = models.PositiveIntegerField(null=True, blank=True)
    message = models.TextField(blank=True, default="", help_text="A follow-up as typed, before it was made standalone.")
    # Served from the answer cache (agents.answer_cache): the run whose answer and citations this one reuses,
    # by id and hash (plain values, like every id in the audit trail). Left out of the hash while empty.
    cached_from_run_id = models.BigIntegerField(null=True, blank=True, help_text="Served from the answer cache: the run reused.")
    cached_from_hash = models.CharField(max_length=64, blank=True, default="", help_text="That run's hash when it was reused.")
    # Not columns: set on fetched runs for display (agents.admin_base name_principals; api.views.agents, or a
    # queryset annotation, counts the citations not verified). Unset until then.
    principal_name: str
    unverified_citations: int

    objects = TenantScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "seq"], name="uniq_run_chain_seq"),
                       models.UniqueConstraint(fields=["tenant", "conversation", "turn"], name="uniq_run_conversation_turn")]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="run_tenant_recent_idx")]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.outcome})"


class RunStep(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="steps", db_constraint=False)
    ordinal = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=StepKind.choices)
    name = models.CharField(max_length=64, help_text="Tool name, or the model task (agent/rewrite/judge/answer).")
    arguments = models.JSONField(default=dict, blank=True)
    effective_filter = models.JSONField(default=dict, blank=True, help_text="Scope ∩ narrowing actually applied.")
    chunk_ids = models.JSONField(default=list, blank=True)
    content_hashes = models.JSONField(default=list, blank=True)
    output = models.TextField(blank=True, help_text="Model text, or a summary of the tool result.")
    cached = models.BooleanField(default=False, help_text="A repeated tool call answered from this run's cache.")
    error = models.TextField(blank=True)
    latency_ms = models.FloatField(default=0.0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    model_input = models.JSONField(default=dict, blank=True, help_text=(
        "What a model call was sent, compacted against the run's earlier calls (agents.prompts.rebuild expands it)."))

    objects = TenantScopedManager()

    class Meta:
        ordering = ["run", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["tenant", "run", "ordinal"], name="uniq_runstep_ordinal")]


class Citation(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="citations", db_constraint=False)
    ordinal = models.PositiveIntegerField()
    chunk_id = models.BigIntegerField()
    document_id = models.BigIntegerField(null=True, blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    quoted_text = models.TextField(blank=True)
    claim = models.TextField(blank=True, help_text="The answer sentence the citation supports.")
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    reason = models.TextField(blank=True)

    objects = TenantScopedManager()

    class Meta:
        ordering = ["run", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["tenant", "run", "ordinal"], name="uniq_citation_ordinal")]


class Evidence(TenantModel):
    """The text of a chunk as a run retrieved it, kept for audit after its document changes or goes.

    Written with the run (agents.services.record_run) for every chunk the run retrieved, once per
    (chunk, content): re-uploading or deleting a document replaces or removes its chunks, never this.
    Append-only for the application role; `manage.py purge_evidence` (as the owner) removes only what
    no run within the tenant's retention period references."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    # The chunk's department when the run saw it: evidence is visible to the scopes its chunk was.
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                   db_constraint=False)
    chunk_id = models.BigIntegerField()
    content_hash = models.CharField(max_length=64)
    document_id = models.BigIntegerField()
    document_version = models.PositiveIntegerField()
    document_title = models.CharField(max_length=500, blank=True)
    locator = models.CharField(max_length=1000, blank=True)
    text = models.TextField()
    first_seen_at = models.DateTimeField()

    objects = TenantScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "chunk_id", "content_hash"], name="uniq_evidence_chunk_content")]


class Feedback(TenantModel):
    """A thumbs up or down, with an optional comment, on one answer, by the principal that asked.

    Append-only like the trace (triggers and grants, agents.chain.TRACE_TABLES): a change of mind is
    a new row, never an edit. Not part of the run's hash: the chain covers what the system did."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="feedback", db_constraint=False)
    principal = models.CharField(max_length=200, help_text="Who gave it: 'user:<id>' or 'key:<public id>'.")
    rating = models.CharField(max_length=8, choices=Rating.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField()

    objects = TenantScopedManager()

    class Meta:
        verbose_name_plural = "feedback"
        indexes = [models.Index(fields=["tenant", "-created_at"], name="feedback_tenant_recent_idx")]

    def __str__(self) -> str:
        return f"{self.rating} on run {self.run_id}"
