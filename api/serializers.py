"""Request validation and response shapes. Ids that name tenant rows are checked through the domain's
access rules (tenants.access, kb.access), so a foreign id is "not found", reported on the field at
fault; what a caller may grant is checked by tenants.access.check_grant in the services the views call."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.loop import STRATEGIES
from agents.models import Citation, Conversation, Feedback, Run, RunStep
from kb.access import check_may_create_corpus
from kb.metadata import NOT_A_JSON_OBJECT, MetadataRejected, json_problem, parse_metadata, text_problem
from kb.models import DEFAULT_CHUNK_TARGET_TOKENS, Corpus, Document, IngestJob
from tenants.access import access_department, departments_in_scope
from tenants.models import ApiKey, Department, Membership, Role
from tenants.scope import NotAllowed, NotVisible, Scope
from tenants.services import display_name

# PostgreSQL bigint: a larger id names no row, and must not reach a query (it would fail there).
ID_MAX = 2**63 - 1
# Nesting any JSON input may have (request bodies, upload metadata); deeper is refused before use.
MAX_JSON_DEPTH = 32
# Search filters: keys matched, and each key's string length and values.
MAX_FILTER_KEYS = 50
MAX_FILTER_KEY_CHARS = 200
MAX_FILTER_VALUE_CHARS = 1000


def id_field(**kwargs) -> serializers.IntegerField:
    """An id from outside: 1..ID_MAX, so an out-of-range number is a 400 on the field, not a database error."""
    return serializers.IntegerField(min_value=1, max_value=ID_MAX, **kwargs)


def _department_in_scope(scope, department_id: int | None) -> Department | None:
    if department_id is None:
        return None
    try:
        return access_department(scope, department_id)
    except NotVisible:
        raise serializers.ValidationError("department not found") from None


def _departments(scope: Scope, ids: list[int]) -> list[Department]:
    try:
        return departments_in_scope(scope, ids)
    except NotAllowed as exc:
        raise serializers.ValidationError(str(exc)) from None


class DepartmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["id", "name"]


class CorpusSerializer(serializers.ModelSerializer):
    department = id_field(source="department_id", allow_null=True, required=False)
    facet_keys = serializers.ListField(
        child=serializers.CharField(max_length=100, trim_whitespace=True), required=False, max_length=50,
        help_text="Metadata keys whose values are enumerations; empty: discovered from the documents.")
    document_count = serializers.IntegerField(read_only=True, required=False)
    reembedding_to = serializers.SerializerMethodField(help_text="'<model>:<dim>' a re-embed job is moving the corpus to, else null")

    class Meta:
        model = Corpus
        fields = ["id", "name", "description", "department", "embedding_model", "embedding_dim", "reembedding_to",
                  "chunk_target_tokens", "chunk_overlap_tokens", "sentence_vectors", "date_key", "facet_keys", "language",
                  "chunk_count", "document_count", "created_at"]
        read_only_fields = ["id", "chunk_count", "created_at"]
        extra_kwargs = {"chunk_target_tokens": {"min_value": 50, "max_value": 2000},
                        "chunk_overlap_tokens": {"min_value": 0, "max_value": 500}}

    # Checked as kb.ingest.corpora checks them for the admin too; the errors name the field.
    def validate_date_key(self, value: str) -> str:
        return _declaration(date_key=value)["date_key"]

    def validate_facet_keys(self, value) -> list[str]:
        return _declaration(facet_keys=value)["facet_keys"]

    def validate_language(self, value: str) -> str:
        return _declaration(language=value)["language"]

    def get_reembedding_to(self, obj: Corpus) -> str | None:
        return f"{obj.next_embedding_model}:{obj.next_embedding_dim}" if obj.next_embedding_model else None

    def validate_department(self, value):
        if self.instance is not None and value != self.instance.department_id:
            # Documents and chunks carry the department too (searches filter on one table): moving a
            # corpus would leave them visible to the old department.
            raise serializers.ValidationError("cannot be changed after creation; create a new corpus")
        dept = _department_in_scope(self.context["scope"], value)
        return dept.id if dept else None

    def validate_name(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError("must not be blank")
        # Names are unique per tenant (the constraint), so the check spans the tenant's departments.
        qs = Corpus.objects.for_scope(Scope.system(self.context["scope"].tenant_id)).filter(name=value)
        if self.instance is not None:
            qs = qs.exclude(pk=self.instance.pk)
        if qs.exists():
            raise serializers.ValidationError("a corpus with this name already exists")
        return value

    def validate(self, attrs):
        target = attrs.get("chunk_target_tokens", getattr(self.instance, "chunk_target_tokens", DEFAULT_CHUNK_TARGET_TOKENS))
        overlap = attrs.get("chunk_overlap_tokens", getattr(self.instance, "chunk_overlap_tokens", 30))
        if overlap >= target:
            raise serializers.ValidationError({"chunk_overlap_tokens": "must be smaller than chunk_target_tokens"})
        if self.instance is None:
            if "embedding_model" in attrs or "embedding_dim" in attrs:
                model = attrs.get("embedding_model", Corpus._meta.get_field("embedding_model").default)
                dim = attrs.get("embedding_dim", Corpus._meta.get_field("embedding_dim").default)
                attrs["embedding_model"], attrs["embedding_dim"] = validate_embedding_model(model, dim)
        else:
            for name in ("embedding_model", "embedding_dim"):
                if name in attrs and attrs[name] != getattr(self.instance, name):
                    raise serializers.ValidationError({name: "changes by re-embedding the corpus: POST /corpora/{id}/reembed/"})
        if self.instance is None:
            try:
                check_may_create_corpus(self.context["scope"], attrs.get("department_id"))
            except NotAllowed as exc:
                raise serializers.ValidationError({exc.field or "department": str(exc)}) from None
        return attrs


def _declaration(**given) -> dict:
    from kb.ingest.corpora import DeclarationRejected, check_declarations

    try:
        return check_declarations(**given)
    except DeclarationRejected as exc:
        raise serializers.ValidationError(exc.message) from None


def validate_embedding_model(model: str, dim: int) -> tuple[str, int]:
    """(model, dim) a corpus can use (kb.embedding.checked_model_key); errors name the field."""
    from kb.embedding import ModelChoiceError, checked_model_key

    try:
        key = checked_model_key(model, dim)
    except ModelChoiceError as exc:
        raise serializers.ValidationError({exc.field: str(exc)}) from None
    name, _, size = key.partition(":")
    return name, int(size)


class ReembedSerializer(serializers.Serializer):
    embedding_model = serializers.CharField(max_length=100)
    embedding_dim = serializers.IntegerField(min_value=1)

    def validate(self, attrs):
        model, dim = validate_embedding_model(attrs["embedding_model"], attrs["embedding_dim"])
        return {"model_key": f"{model}:{dim}"}


def job_progress(job: IngestJob | None) -> dict | None:
    if job is None:
        return None
    percent = 100.0 if job.status == "done" else (round(100.0 * job.chunks_done / job.chunks_total, 1) if job.chunks_total else 0.0)
    return {"job": job.id, "status": job.status, "stage": job.stage, "chunks_done": job.chunks_done,
            "chunks_total": job.chunks_total, "percent": percent}


class ProgressSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    status = serializers.CharField()
    stage = serializers.CharField()
    chunks_done = serializers.IntegerField()
    chunks_total = serializers.IntegerField()
    percent = serializers.FloatField()


class DocumentSerializer(serializers.ModelSerializer):
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Document
        fields = ["id", "corpus", "department", "title", "source_name", "mime_type", "size_bytes", "sha256", "status", "error",
                  "metadata", "dated_at", "version", "chunk_count", "progress", "created_at", "updated_at"]
        read_only_fields = fields

    def get_progress(self, obj: Document) -> ProgressSerializer(allow_null=True):  # type: ignore[valid-type]
        jobs = getattr(obj, "latest_jobs", None)
        if jobs is None:
            jobs = list(IngestJob.objects.for_scope(self.context["scope"]).filter(document_id=obj.id).order_by("-id")[:1])
        return job_progress(jobs[0] if jobs else None)


class IngestJobSerializer(serializers.ModelSerializer):
    percent = serializers.SerializerMethodField()

    class Meta:
        model = IngestJob
        fields = ["id", "corpus", "document", "kind", "status", "stage", "chunks_done", "chunks_total", "percent", "error",
                  "attempts", "created_at", "started_at", "heartbeat_at", "finished_at"]
        read_only_fields = fields

    def get_percent(self, obj: IngestJob) -> float:
        return job_progress(obj)["percent"]


class UploadSerializer(serializers.Serializer):
    corpus = id_field()
    files = serializers.ListField(child=serializers.FileField(allow_empty_file=False), allow_empty=False)
    metadata = serializers.CharField(required=False, allow_blank=True, help_text="JSON object applied to every file.")
    title = serializers.CharField(required=False, allow_blank=False, max_length=500, help_text="Only with a single file.")

    def validate_files(self, files):
        if len(files) > settings.MAX_FILES_PER_UPLOAD:
            raise serializers.ValidationError(f"at most {settings.MAX_FILES_PER_UPLOAD} files per upload")
        for f in files:
            if f.size > settings.MAX_UPLOAD_BYTES:
                raise serializers.ValidationError(f"{f.name}: larger than {settings.MAX_UPLOAD_BYTES} bytes")
        return files

    def validate_metadata(self, raw: str) -> dict:
        """A JSON object of storable text, at most MAX_METADATA_CHARS characters and MAX_METADATA_DEPTH levels
        (kb.metadata.parse_metadata, the rule the admin's upload form uses too)."""
        try:
            return parse_metadata(raw)
        except MetadataRejected as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs):
        if attrs.get("title") and len(attrs["files"]) > 1:
            raise serializers.ValidationError({"title": "only allowed with a single file"})
        return attrs


class UploadResultSerializer(serializers.Serializer):
    documents = DocumentSerializer(many=True)
    jobs = serializers.ListField(child=serializers.IntegerField(allow_null=True))


@extend_schema_field(OpenApiTypes.OBJECT)
class MetadataFilterField(serializers.Field):
    """`{key: value or [values]}` on document metadata. Its size is checked before its contents, so an
    oversized filter costs one len(): at most MAX_FILTER_KEYS keys, each a storable string of at most
    MAX_FILTER_KEY_CHARS, each value a string (at most MAX_FILTER_VALUE_CHARS), finite number or
    boolean, or a list of 1-50 of them (any of)."""

    default_error_messages = {"not_a_dict": NOT_A_JSON_OBJECT}

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("help_text", f"Equality on document metadata keys (at most {MAX_FILTER_KEYS}); a list means any of.")
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> dict:
        if not isinstance(data, dict):
            self.fail("not_a_dict")
        if len(data) > MAX_FILTER_KEYS:
            raise serializers.ValidationError(f"at most {MAX_FILTER_KEYS} keys, got {len(data)}")
        for key, v in data.items():
            if (problem := text_problem(key)) or len(key) > MAX_FILTER_KEY_CHARS:
                raise serializers.ValidationError(f"keys: {problem or f'at most {MAX_FILTER_KEY_CHARS} characters'}")
            values = v if isinstance(v, list) else [v]
            if (isinstance(v, list) and not 1 <= len(v) <= 50) or not all(isinstance(x, str | int | float | bool) for x in values):
                raise serializers.ValidationError(
                    f"{key}: values must be strings, numbers or booleans, or a list of 1-50 of them (any of)")
            if problem := json_problem(values, max_depth=2, max_string=MAX_FILTER_VALUE_CHARS, check_text=True):
                raise serializers.ValidationError(f"{key}: {problem}")
        return data

    def to_representation(self, value) -> dict:
        return value


class SearchFiltersSerializer(serializers.Serializer):
    corpus_ids = serializers.ListField(child=id_field(), required=False, max_length=100)
    document_ids = serializers.ListField(child=id_field(), required=False, max_length=1000)
    department_ids = serializers.ListField(child=id_field(), required=False, max_length=100)
    metadata = MetadataFilterField(required=False)
    date_after = serializers.DateTimeField(required=False, input_formats=["iso-8601", "%Y-%m-%d"],
                                           help_text="Only documents dated on or after it (the date under their corpus's date_key).")
    date_before = serializers.DateTimeField(required=False, input_formats=["iso-8601", "%Y-%m-%d"],
                                            help_text="Only documents dated before it. Undated documents match no date filter.")


class SearchRequestSerializer(serializers.Serializer):
    query = serializers.CharField(max_length=2000, trim_whitespace=True)
    k = serializers.IntegerField(min_value=1, max_value=50, default=10)
    mode = serializers.ChoiceField(choices=["vector", "keyword", "hybrid"], default="hybrid")
    filters = SearchFiltersSerializer(required=False)
    rerank = serializers.BooleanField(default=True, help_text="Re-rank candidates by their best-matching sentences "
                                      "where the corpus stores sentence vectors (no effect elsewhere).")


class SearchHitSerializer(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    corpus_id = serializers.IntegerField()
    corpus_name = serializers.CharField()
    document_title = serializers.CharField()
    locator = serializers.CharField()
    page = serializers.IntegerField(allow_null=True)
    ordinal = serializers.IntegerField()
    text = serializers.CharField()
    score = serializers.FloatField()
    metadata = serializers.DictField()
    flags = serializers.ListField(child=serializers.CharField())


class SearchResponseSerializer(serializers.Serializer):
    hits = SearchHitSerializer(many=True)
    applied_filter = serializers.DictField()
    path = serializers.CharField()
    timings_ms = serializers.DictField()


class AskRequestSerializer(serializers.Serializer):
    question = serializers.CharField(max_length=4000, trim_whitespace=True)
    strategy = serializers.ChoiceField(choices=list(STRATEGIES), default="auto")


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.JSONField):
    """A stored JSON object, typed as one in the OpenAPI schema."""


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListField(serializers.JSONField):
    """A stored JSON list of strings, typed as one in the OpenAPI schema."""


@extend_schema_field({"type": "array", "items": {"type": "integer"}})
class IntegerListField(serializers.JSONField):
    """A stored JSON list of integers, typed as one in the OpenAPI schema."""


@extend_schema_field({"type": "object", "properties": {
    "tenant_id": {"type": "integer"}, "department_ids": {"type": "array", "items": {"type": "integer"}},
    "all_departments": {"type": "boolean"}, "role": {"type": "string"}, "principal": {"type": "string"}}})
class ScopeField(serializers.JSONField):
    """A run's scope (tenants.scope.Scope.as_dict())."""


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
                  "conversation", "turn", "message"]
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


class ConversationSerializer(serializers.ModelSerializer):
    turn_count = serializers.IntegerField(source="turns", read_only=True)

    class Meta:
        model = Conversation
        fields = ["id", "title", "turn_count", "created_at", "updated_at"]
        read_only_fields = ["id", "turn_count", "created_at", "updated_at"]
        extra_kwargs = {"title": {"required": False, "allow_blank": True, "max_length": 200}}


class TurnSerializer(serializers.ModelSerializer):
    """One turn of a conversation: what was typed, the standalone question answered, and the answer.
    The context carries `citations` (run id -> [Citation]) and `chunks` (id -> Chunk)."""

    run_id = serializers.IntegerField(source="id", read_only=True)
    citations = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["run_id", "turn", "message", "question", "answer", "outcome", "grounded", "missing", "strategy", "created_at",
                  "citations"]
        read_only_fields = fields

    def get_citations(self, obj) -> CitationSerializer(many=True):  # type: ignore[valid-type]
        return CitationSerializer(self.context["citations"].get(obj.id, []), many=True, context=self.context).data


class ConversationDetailSerializer(ConversationSerializer):
    turns = serializers.SerializerMethodField(help_text="The turns in order (context: `runs`, `citations`, `chunks`).")

    class Meta(ConversationSerializer.Meta):
        fields = ConversationSerializer.Meta.fields + ["turns"]
        read_only_fields = fields

    def get_turns(self, obj) -> TurnSerializer(many=True):  # type: ignore[valid-type]
        return TurnSerializer(self.context["runs"], many=True, context=self.context).data


class MessageRequestSerializer(serializers.Serializer):
    message = serializers.CharField(max_length=4000, trim_whitespace=True,
                                    help_text="The next question, as the user typed it (a follow-up may refer to earlier turns).")
    strategy = serializers.ChoiceField(choices=list(STRATEGIES), default="auto")


class FeedbackSerializer(serializers.ModelSerializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    class Meta:
        model = Feedback
        fields = ["id", "run", "principal", "rating", "comment", "created_at"]
        read_only_fields = ["id", "run", "principal", "created_at"]


class ChainStatusSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    runs_checked = serializers.IntegerField()
    first_break = serializers.DictField(allow_null=True)


class ApiKeySerializer(serializers.ModelSerializer):
    departments = serializers.ListField(child=id_field(), required=False, write_only=True, max_length=1000)
    department_ids = serializers.SerializerMethodField()
    prefix = serializers.SerializerMethodField()
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "role", "all_departments", "departments", "department_ids", "active", "created_at",
                  "revoked_at", "last_used_at"]
        read_only_fields = ["id", "prefix", "active", "created_at", "revoked_at", "last_used_at"]

    def get_department_ids(self, obj) -> list[int]:
        return sorted(d.id for d in obj.departments.all())

    def get_prefix(self, obj) -> str:
        return f"gk_{obj.public_id}_"

    def validate_departments(self, ids: list[int]) -> list[Department]:
        return _departments(self.context["scope"], ids)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The raw key. Shown once; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = ApiKeySerializer.Meta.fields + ["key"]


class MembershipSerializer(serializers.ModelSerializer):
    """A member. `username` is the name in this tenant: adding one finds the tenant's own user of that
    name or creates one (signing in as `login`, `<username>@<tenant slug>`); users of other tenants are
    never found, and the answer is the same whether the name exists elsewhere or not."""

    username = serializers.CharField(source="user.username", max_length=150, validators=[UnicodeUsernameValidator()])
    login = serializers.SerializerMethodField(help_text="The name the member signs in with")
    email = serializers.EmailField(source="user.email", required=False, allow_blank=True)
    departments = serializers.ListField(child=id_field(), required=False, write_only=True, max_length=1000)
    department_ids = serializers.SerializerMethodField()

    class Meta:
        model = Membership
        fields = ["id", "username", "login", "email", "role", "all_departments", "departments", "department_ids"]
        read_only_fields = ["id"]

    def get_department_ids(self, obj) -> list[int]:
        return sorted(d.id for d in obj.departments.all())

    def get_login(self, obj) -> str:
        return obj.user.username

    def to_representation(self, obj):
        data = super().to_representation(obj)
        data["username"] = display_name(obj.user, obj.tenant.slug)
        return data

    def validate_role(self, value: str) -> str:
        if value not in Role.values:
            raise serializers.ValidationError("unknown role")
        return value

    def validate_departments(self, ids: list[int]) -> list[Department]:
        return _departments(self.context["scope"], ids)

    def validate(self, attrs):
        if self.instance is not None and "user" in attrs:
            raise serializers.ValidationError({"username": "cannot be changed; remove and add the member instead"})
        return attrs


# --- Sources ---------------------------------------------------------------------------------------

class SourceSyncSerializer(serializers.Serializer):
    """One sync's status and summary (counts; seconds from start to end)."""

    id = serializers.IntegerField()
    source = serializers.IntegerField(source="source_id")
    trigger = serializers.CharField()
    status = serializers.CharField()
    stage = serializers.CharField()
    seen = serializers.IntegerField()
    added = serializers.IntegerField()
    changed = serializers.IntegerField()
    moved = serializers.IntegerField()
    removed = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    failed = serializers.IntegerField()
    complete_listing = serializers.BooleanField()
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    seconds = serializers.FloatField(allow_null=True)


class SourceRuleSerializer(serializers.Serializer):
    prefix = serializers.CharField(max_length=1000, allow_blank=True, trim_whitespace=False)
    department = id_field(allow_null=True)


class SourceSerializer(serializers.Serializer):
    """A source. `credentials` are write-only: encrypted at rest and never returned (`has_credentials`
    says whether some are stored)."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=200)
    corpus = id_field(source="corpus_id")
    kind = serializers.ChoiceField(choices=["folder", "s3", "website"])
    config = serializers.DictField(help_text="folder: {path}; s3: {bucket, prefix, endpoint_url, region}; website: "
                                             "{start_url, sitemap_url, max_pages, max_depth, max_page_bytes, "
                                             "timeout_seconds, time_limit_seconds} (docs/sources.md)")
    credentials = serializers.DictField(child=serializers.CharField(max_length=4000), write_only=True, required=False,
                                        help_text="s3: {access_key_id, secret_access_key}; website: {authorization}. "
                                                  "Never returned.")
    has_credentials = serializers.BooleanField(source="has_secret", read_only=True)
    department_rules = SourceRuleSerializer(many=True, required=False, max_length=200)
    schedule_minutes = serializers.IntegerField(min_value=0, max_value=60 * 24 * 31, required=False, default=60)
    paused = serializers.BooleanField(required=False, default=False)
    next_sync_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_sync = SourceSyncSerializer(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)


class SourcePatchSerializer(SourceSerializer):
    corpus = None
    kind = None
    schedule_minutes = serializers.IntegerField(min_value=0, max_value=60 * 24 * 31, required=False)
    paused = serializers.BooleanField(required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("name", "config"):
            self.fields[name].required = False


class SourceItemSerializer(serializers.Serializer):
    key = serializers.CharField()
    state = serializers.CharField()
    document = serializers.IntegerField(source="document_id", allow_null=True)
    department = serializers.IntegerField(source="department_id", allow_null=True)
    size_bytes = serializers.IntegerField()
    error = serializers.CharField()
    last_seen_sync = serializers.IntegerField(source="last_seen_sync_id", allow_null=True)
    changed_by_sync = serializers.IntegerField(source="changed_by_sync_id", allow_null=True)
    updated_at = serializers.DateTimeField()


class SyncRequestResultSerializer(serializers.Serializer):
    sync = SourceSyncSerializer()
    joined = serializers.BooleanField(help_text="true: a sync of this source was already queued or running; this is it")
