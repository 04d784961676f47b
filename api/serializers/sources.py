"""Sources (folder, S3, website) and their syncs and items."""

from __future__ import annotations

from rest_framework import serializers

from api.serializers.common import id_field


class SourceSyncSerializer(serializers.Serializer):
    """One sync's status and summary (counts; seconds from start to end)."""

    id = serializers.IntegerField()
    # The stubs see Field.source (a string) here; DRF's metaclass takes declared fields out of the class attributes.
    source = serializers.IntegerField(source="source_id")  # type: ignore[assignment]
    trigger = serializers.CharField()
    status = serializers.CharField()
    stage = serializers.CharField()
    seen = serializers.IntegerField(help_text="Items the sync listed upstream.")
    added = serializers.IntegerField()
    changed = serializers.IntegerField()
    moved = serializers.IntegerField(help_text="Items whose department (or key) changed, chunks kept.")
    removed = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="Items that could not be read or parsed (a previous version stays searchable).")
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
    # many=True passes max_length to the ListSerializer (DRF 3.14+); the stubs do not list it.
    department_rules = SourceRuleSerializer(many=True, required=False, max_length=200)  # type: ignore[call-arg]
    schedule_minutes = serializers.IntegerField(min_value=0, max_value=60 * 24 * 31, required=False, default=60)
    paused = serializers.BooleanField(required=False, default=False)
    next_sync_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_sync = SourceSyncSerializer(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)


class SourcePatchSerializer(SourceSerializer):
    # None removes an inherited declared field (DRF's documented way); the stubs type only the field.
    corpus = None  # type: ignore[assignment]
    kind = None  # type: ignore[assignment]
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
