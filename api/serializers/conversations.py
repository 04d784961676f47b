"""Conversations, their turns and messages, and feedback on runs."""

from __future__ import annotations

from rest_framework import serializers

from agents.loop import STRATEGIES
from agents.models import Conversation, Feedback, Run
from agents.rendering import answer_html
from agents.services import MAX_QUESTION_CHARS
from api.serializers.agents import CitationSerializer, corpus_choice_field


class ConversationSerializer(serializers.ModelSerializer):
    turn_count = serializers.IntegerField(source="turns", read_only=True)

    class Meta:
        model = Conversation
        fields = ["id", "title", "turn_count", "created_at", "updated_at"]
        read_only_fields = ["id", "turn_count", "created_at", "updated_at"]
        extra_kwargs = {"title": {"required": False, "allow_blank": True, "max_length": 200}}


class ConversationRenameSerializer(serializers.Serializer):
    title = serializers.CharField(max_length=200, trim_whitespace=True, help_text="The new title (not empty).")


class TurnSerializer(serializers.ModelSerializer):
    """One turn of a conversation: what was typed, the standalone question answered, and the answer.
    The context carries `citations` (run id -> [Citation]) and `chunks` (id -> Chunk)."""

    run_id = serializers.IntegerField(source="id", read_only=True)
    citations = serializers.SerializerMethodField()
    answer_html = serializers.SerializerMethodField(help_text="The answer's Markdown as sanitised HTML, citations as "
                                                    "button.cite[data-chunk] (agents.rendering).")

    class Meta:
        model = Run
        fields = ["run_id", "turn", "message", "question", "answer", "answer_html", "outcome", "grounded", "missing", "strategy",
                  "created_at", "citations"]
        read_only_fields = fields

    def get_answer_html(self, obj) -> str:
        return answer_html(obj.answer)

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
    message = serializers.CharField(max_length=MAX_QUESTION_CHARS, trim_whitespace=True,
                                    help_text="The next question, as the user typed it (a follow-up may refer to earlier turns).")
    strategy = serializers.ChoiceField(choices=list(STRATEGIES), default="auto")
    corpus_ids = corpus_choice_field()


class FeedbackSerializer(serializers.ModelSerializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    principal_name = serializers.SerializerMethodField(
        help_text="The principal with its key or user named: '<key name> (key)', '<username> (user)'.")

    class Meta:
        model = Feedback
        fields = ["id", "run", "principal", "principal_name", "rating", "comment", "created_at"]
        read_only_fields = ["id", "run", "principal", "created_at"]

    def get_principal_name(self, obj) -> str:
        # The context's `principal_names` (agents.review.principal_names), computed by the view for the page.
        return self.context.get("principal_names", {}).get(obj.principal, obj.principal)
