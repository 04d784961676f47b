from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api.views import agents, kb, sources, tenants

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("corpora/", kb.CorpusList.as_view(), name="corpus-list"),
    path("corpora/<int:corpus_id>/", kb.CorpusDetail.as_view(), name="corpus-detail"),
    path("corpora/<int:corpus_id>/reembed/", kb.CorpusReembed.as_view(), name="corpus-reembed"),
    path("documents/", kb.DocumentList.as_view(), name="document-list"),
    path("documents/<int:document_id>/", kb.DocumentDetail.as_view(), name="document-detail"),
    path("documents/<int:document_id>/reingest/", kb.DocumentReingest.as_view(), name="document-reingest"),
    path("jobs/", kb.JobList.as_view(), name="job-list"),
    path("jobs/<int:job_id>/", kb.JobDetail.as_view(), name="job-detail"),
    path("sources/", sources.SourceList.as_view(), name="source-list"),
    path("sources/<int:source_id>/", sources.SourceDetail.as_view(), name="source-detail"),
    path("sources/<int:source_id>/sync/", sources.SourceSyncNow.as_view(), name="source-sync"),
    path("sources/<int:source_id>/syncs/", sources.SourceSyncList.as_view(), name="source-sync-list"),
    path("sources/<int:source_id>/items/", sources.SourceItemList.as_view(), name="source-item-list"),
    path("search/", kb.Search.as_view(), name="search"),
    path("ask/", agents.Ask.as_view(), name="ask"),
    path("ask/stream/", agents.AskStream.as_view(), name="ask-stream"),
    path("runs/", agents.RunList.as_view(), name="run-list"),
    path("runs/verify/", agents.ChainVerify.as_view(), name="run-chain-verify"),
    path("runs/<int:run_id>/", agents.RunDetail.as_view(), name="run-detail"),
    path("departments/", tenants.DepartmentList.as_view(), name="department-list"),
    path("keys/", tenants.ApiKeyList.as_view(), name="key-list"),
    path("keys/<int:key_id>/", tenants.ApiKeyDetail.as_view(), name="key-detail"),
    path("members/", tenants.MemberList.as_view(), name="member-list"),
    path("members/<int:member_id>/", tenants.MemberDetail.as_view(), name="member-detail"),
]
