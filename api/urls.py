from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api.views import agents, conversations, document_files, feedback, kb, tenants

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("corpora/", kb.CorpusList.as_view(), name="corpus-list"),
    path("corpora/<int:corpus_id>/", kb.CorpusDetail.as_view(), name="corpus-detail"),
    path("corpora/<int:corpus_id>/reembed/", kb.CorpusReembed.as_view(), name="corpus-reembed"),
    path("documents/", kb.DocumentList.as_view(), name="document-list"),
    path("documents/<int:document_id>/", kb.DocumentDetail.as_view(), name="document-detail"),
    path("documents/<int:document_id>/reingest/", kb.DocumentReingest.as_view(), name="document-reingest"),
    path("documents/<int:document_id>/file/", document_files.DocumentFile.as_view(), name="document-file"),
    path("jobs/", kb.JobList.as_view(), name="job-list"),
    path("jobs/<int:job_id>/", kb.JobDetail.as_view(), name="job-detail"),
    path("search/", kb.Search.as_view(), name="search"),
    path("ask/", agents.Ask.as_view(), name="ask"),
    path("ask/stream/", agents.AskStream.as_view(), name="ask-stream"),
    path("conversations/", conversations.ConversationList.as_view(), name="conversation-list"),
    path("conversations/<int:conversation_id>/", conversations.ConversationDetail.as_view(), name="conversation-detail"),
    path("conversations/<int:conversation_id>/messages/", conversations.ConversationMessages.as_view(), name="conversation-messages"),
    path("conversations/<int:conversation_id>/messages/stream/", conversations.ConversationMessagesStream.as_view(),
         name="conversation-messages-stream"),
    path("runs/", agents.RunList.as_view(), name="run-list"),
    path("runs/verify/", agents.ChainVerify.as_view(), name="run-chain-verify"),
    path("runs/<int:run_id>/", agents.RunDetail.as_view(), name="run-detail"),
    path("runs/<int:run_id>/feedback/", feedback.RunFeedback.as_view(), name="run-feedback"),
    path("feedback/", feedback.FeedbackList.as_view(), name="feedback-list"),
    path("departments/", tenants.DepartmentList.as_view(), name="department-list"),
    path("keys/", tenants.ApiKeyList.as_view(), name="key-list"),
    path("keys/<int:key_id>/", tenants.ApiKeyDetail.as_view(), name="key-detail"),
    path("members/", tenants.MemberList.as_view(), name="member-list"),
    path("members/<int:member_id>/", tenants.MemberDetail.as_view(), name="member-detail"),
]
