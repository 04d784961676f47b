"""Request validation and response shapes, one module per domain: `common` (id bounds, JSON limits,
department checks, JSON field types), `kb` (corpora, documents, jobs, uploads, search), `agents` (ask, runs,
chain), `conversations` (conversations, messages, feedback), `tenants` (departments, keys, members), `sources`.

Every name is re-exported here, so callers keep `from api import serializers as s` and `s.RunSerializer`.
Ids that name tenant rows are checked through the domain's access rules (tenants.access, kb.access), so a
foreign id is "not found", reported on the field at fault; what a caller may grant is checked by
tenants.access.check_grant in the services the views call."""

from api.serializers.agents import (  # noqa: F401
    AskRequestSerializer,
    ChainStatusSerializer,
    CitationSerializer,
    RunDetailSerializer,
    RunSerializer,
    RunStepSerializer,
)
from api.serializers.common import (  # noqa: F401
    ID_MAX,
    MAX_FILTER_KEY_CHARS,
    MAX_FILTER_KEYS,
    MAX_FILTER_VALUE_CHARS,
    MAX_JSON_DEPTH,
    IntegerListField,
    ObjectField,
    ScopeField,
    StringListField,
    id_field,
)
from api.serializers.conversations import (  # noqa: F401
    ConversationDetailSerializer,
    ConversationSerializer,
    FeedbackSerializer,
    MessageRequestSerializer,
    TurnSerializer,
)
from api.serializers.kb import (  # noqa: F401
    CorpusSerializer,
    DocumentSerializer,
    IngestJobSerializer,
    MetadataFilterField,
    ProgressSerializer,
    ReembedSerializer,
    SearchFiltersSerializer,
    SearchHitSerializer,
    SearchRequestSerializer,
    SearchResponseSerializer,
    UploadResultSerializer,
    UploadSerializer,
    job_progress,
    validate_embedding_model,
)
from api.serializers.sources import (  # noqa: F401
    SourceItemSerializer,
    SourcePatchSerializer,
    SourceRuleSerializer,
    SourceSerializer,
    SourceSyncSerializer,
    SyncRequestResultSerializer,
)
from api.serializers.tenants import (  # noqa: F401
    ApiKeyCreatedSerializer,
    ApiKeySerializer,
    DepartmentSerializer,
    MembershipSerializer,
)

__all__ = [
    "ID_MAX",
    "MAX_JSON_DEPTH",
    "MAX_FILTER_KEYS",
    "MAX_FILTER_KEY_CHARS",
    "MAX_FILTER_VALUE_CHARS",
    "id_field",
    "DepartmentSerializer",
    "CorpusSerializer",
    "validate_embedding_model",
    "ReembedSerializer",
    "job_progress",
    "ProgressSerializer",
    "DocumentSerializer",
    "IngestJobSerializer",
    "UploadSerializer",
    "UploadResultSerializer",
    "MetadataFilterField",
    "SearchFiltersSerializer",
    "SearchRequestSerializer",
    "SearchHitSerializer",
    "SearchResponseSerializer",
    "AskRequestSerializer",
    "ObjectField",
    "StringListField",
    "IntegerListField",
    "ScopeField",
    "RunSerializer",
    "RunStepSerializer",
    "CitationSerializer",
    "RunDetailSerializer",
    "ConversationSerializer",
    "TurnSerializer",
    "ConversationDetailSerializer",
    "MessageRequestSerializer",
    "FeedbackSerializer",
    "ChainStatusSerializer",
    "ApiKeySerializer",
    "ApiKeyCreatedSerializer",
    "MembershipSerializer",
    "SourceSyncSerializer",
    "SourceRuleSerializer",
    "SourceSerializer",
    "SourcePatchSerializer",
    "SourceItemSerializer",
    "SyncRequestResultSerializer",
]
