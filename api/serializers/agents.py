"""Ask requests, runs with their steps and citations, and the chain status."""

from __future__ import annotations

from rest_framework import serializers

from agents.loop import STRATEGIES
from agents.models import Citation, Run, RunStep
from agents.services import MAX_QUESTION_CHARS
from api.serializers.common import IntegerListField, ObjectField, ScopeField, StringListField, id_field


def corpus_choice_field() -> serializers.ListField:
    """The corpora a question is asked of (ids from GET /corpora/); left out: all the caller's."""
    return serializers.ListField(child=id_field(), required=False, allow_empty=False, max_length=100,
                                 help_text="Ask only these of your corpora (ids from GET /corpora/); an id you cannot "
                                           "see is a 400 on this field. Left out: all of them.")


class AskRequestSerializer(serializers.Serializer):
    question = serializers.CharField(max_length=MAX_QUESTION_CHARS, trim_whitespace=True)
    strategy = serializers.ChoiceField(choices=list(STRATEGIES), default="auto")
    corpus_ids = corpus_choice_field()
    cache = serializers.BooleanField(default=True, help_text=(
        "Reuse the answer of an earlier identical question in the same scope and corpus versions when the tenant keeps "
        "answers (the run is then marked `cached_from_run_id`); false: always answer afresh."))


class RunSerializer(serializers.ModelSerializer):
    unverified_citations = serializers.IntegerField(read_only=True, default=0)
    scope = ScopeField(read_only=True, help_text="The scope the run was confined to.")
    budgets = ObjectField(read_only=True, help_text="The budgets the run had (agents.budgets.Budgets).")
    missing = StringListField(read_only=True, help_text="Parts of the question no evidence was found for.")
    principal_name = serializers.SerializerMethodField(
        help_text="The principal with each key and user named: '<key name> (key)', '<username> (user)'.")

    class Meta:
        model = Run
        fields = ["id", "seq", "principal", "principal_name", "scope", "question", "strategy_requested", "strategy", "provider", "model",
                  "prompt_version", "budgets", "answer", "outcome", "grounded", "strict", "missing", "error", "input_tokens",
                  "output_tokens", "tool_calls", "latency_ms", "created_at", "prev_hash", "hash", "unverified_citations",
                  "conversation", "turn", "message", "cached_from_run_id", "cached_from_hash"]
        read_only_fields = fields

    def get_principal_name(self, obj) -> str:
        return self.context.get("principal_names", {}).get(obj.principal, obj.principal)


class RunStepSerializer(serializers.ModelSerializer):
    arguments = ObjectField(read_only=True, help_text="The call's arguments (a model call's: provider, model, caps, tool calls).")
    effective_filter = ObjectField(read_only=True, help_text="Scope and narrowing a search actually applied.")
    chunk_ids = IntegerListField(read_only=True)
    content_hashes = StringListField(read_only=True)

    class Meta:
        model = RunStep
        fields = ["ordinal", "kind", "name", "arguments", "effective_filter", "chunk_ids", "content_hashes", "output", "cached",
                  "error", "latency_ms", "input_tokens", "output_tokens"]
        read_only_fields = fields


class CitationSerializer(serializers.ModelSerializer):
    chunk = serializers.SerializerMethodField(help_text="The cited chunk as it is now, if it still exists and is visible.")
    evidence = serializers.SerializerMethodField(help_text=(
        "The cited text exactly as the run retrieved it, with the document version it came from and whether the document "
        "changed since (kept for the tenant's retention period even after re-upload or deletion)."))

    class Meta:
        model = Citation
        fields = ["ordinal", "chunk_id", "document_id", "content_hash", "quoted_text", "claim", "verdict", "reason", "chunk",
                  "evidence"]
        read_only_fields = fields

    def get_evidence(self, obj) -> dict | None:
        found = self.context.get("evidence", {}).get((obj.chunk_id, obj.content_hash))
        return found.as_dict() if found is not None else None

    def get_chunk(self, obj) -> dict | None:
        chunk = self.context.get("chunks", {}).get(obj.chunk_id)
        if chunk is None:
            return None
        return {"id": chunk.id, "document_id": chunk.document_id, "document_title": chunk.document.title,
                "version": chunk.document.version, "locator": chunk.locator, "page": chunk.page, "text": chunk.text,
                "unchanged": chunk.content_hash == obj.content_hash}


class RunDetailSerializer(RunSerializer):
    # The context carries `steps`, `citations`, `chunks` (id -> Chunk) and `principal_names`: api.views.agents.run_detail.
    steps = serializers.SerializerMethodField()
    citations = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["steps", "citations"]
        read_only_fields = fields

    def get_steps(self, obj) -> RunStepSerializer(many=True):  # type: ignore[valid-type]
        return RunStepSerializer(self.context["steps"], many=True).data

    def get_citations(self, obj) -> CitationSerializer(many=True):  # type: ignore[valid-type]
        return CitationSerializer(self.context["citations"], many=True, context=self.context).data


class ChainStatusSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    runs_checked = serializers.IntegerField()
    first_break = serializers.DictField(allow_null=True)
