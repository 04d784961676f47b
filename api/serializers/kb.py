"""Corpora, documents, ingest jobs, uploads and search: request validation and response shapes."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers.common import MAX_FILTER_KEY_CHARS, MAX_FILTER_KEYS, MAX_FILTER_VALUE_CHARS, department_or_400, id_field
from kb.access import check_may_create_corpus
from kb.embedding import ModelChoiceError, checked_model_key
from kb.ingest.corpora import DeclarationRejected, check_declarations
from kb.metadata import NOT_A_JSON_OBJECT, MetadataRejected, json_problem, parse_metadata, text_problem
from kb.models import DEFAULT_CHUNK_TARGET_TOKENS, Corpus, Document, IngestJob
from tenants.conf import product_settings
from tenants.scope import NotAllowed, Scope


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
        dept = department_or_400(self.context["scope"], value)
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
    try:
        return check_declarations(**given)
    except DeclarationRejected as exc:
        raise serializers.ValidationError(exc.message) from None


def validate_embedding_model(model: str, dim: int) -> tuple[str, int]:
    """(model, dim) a corpus can use (kb.embedding.checked_model_key); errors name the field."""
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


def job_percent(job: IngestJob) -> float:
    """How far the job is, 0-100 (one decimal)."""
    if job.status == "done":
        return 100.0
    return round(100.0 * job.chunks_done / job.chunks_total, 1) if job.chunks_total else 0.0


def job_progress(job: IngestJob | None) -> dict | None:
    if job is None:
        return None
    return {"job": job.id, "status": job.status, "stage": job.stage, "chunks_done": job.chunks_done,
            "chunks_total": job.chunks_total, "percent": job_percent(job)}


class ProgressSerializer(serializers.Serializer):
    job = serializers.IntegerField(help_text="The ingest job's id (GET /api/v1/jobs/{id}/).")
    status = serializers.CharField()
    stage = serializers.CharField()
    chunks_done = serializers.IntegerField()
    chunks_total = serializers.IntegerField()
    percent = serializers.FloatField(help_text="0 to 100, one decimal; 100 once the job is done.")


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
        return job_percent(obj)


class UploadSerializer(serializers.Serializer):
    corpus = id_field()
    files = serializers.ListField(child=serializers.FileField(allow_empty_file=False), allow_empty=False)
    metadata = serializers.CharField(required=False, allow_blank=True, help_text="JSON object applied to every file.")
    title = serializers.CharField(required=False, allow_blank=False, max_length=500, help_text="Only with a single file.")

    def validate_files(self, files):
        if len(files) > product_settings.MAX_FILES_PER_UPLOAD:
            raise serializers.ValidationError(f"at most {product_settings.MAX_FILES_PER_UPLOAD} files per upload")
        for f in files:
            if f.size > product_settings.MAX_UPLOAD_BYTES:
                raise serializers.ValidationError(f"{f.name}: larger than {product_settings.MAX_UPLOAD_BYTES} bytes")
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
    document_id = serializers.IntegerField(help_text="The document's id (GET /api/v1/documents/{id}/).")
    corpus_id = serializers.IntegerField()
    corpus_name = serializers.CharField()
    document_title = serializers.CharField()
    locator = serializers.CharField(help_text="Heading path or page, e.g. 'Travel > Hotels'.")
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
