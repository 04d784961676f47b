"""The schedule: a scheduler pass (the beat task `kb.schedule_source_syncs`, or `manage.py sync_sources`,
whose `--loop` is the embedded run's scheduler) syncs every unpaused source whose next_sync_at has
passed, in every tenant, moves next_sync_at on by the source's interval, and resends queued syncs
whose message was lost. Transactional: the scheduler reads through the owner connection, which sees
only committed rows; with no broker each sync runs in this process as it is queued."""

from __future__ import annotations

import io
import os
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.utils import timezone

from api.project.celery import app as celery_app
from kb.management.commands import sync_sources as sync_sources_command
from kb.models import Corpus, Document, Source, SourceSync
from kb.sources.services import source_create, source_update
from kb.sources.sync import STALE_QUEUED_SECONDS, schedule_due_sources
from kb.tasks import schedule_source_syncs_task
from tenants.scope import activate
from tests.factories import make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.conftest import grant

pytestmark = pytest.mark.django_db(databases=["default", "owner"], transaction=True)


@pytest.fixture
def make_source(world):
    """make_source(name, schedule_minutes, paused=False, scope=world's, corpus=world's): a folder source
    of one file, scheduled every `schedule_minutes`."""
    folder = world["root"] / "share"
    folder.mkdir()
    (folder / "policy.md").write_text("# Policy\n\nEvery expense needs a receipt within 30 days.")

    def make(name: str, schedule_minutes: int, *, paused: bool = False, scope=None, corpus=None, path=None) -> Source:
        return source_create(scope=scope or world["scope"], corpus=corpus or world["corpus"], name=name, kind="folder",
                             config={"path": str(path or folder)}, schedule_minutes=schedule_minutes, paused=paused)

    return make


def syncs_of(scope, source) -> list[tuple[str, str]]:
    """(trigger, status) of each sync of `source`, oldest first."""
    with activate(scope):
        return list(SourceSync.objects.for_scope(scope).filter(source=source).order_by("pk").values_list("trigger", "status"))


def next_sync_at(scope, source):
    with activate(scope):
        return Source.objects.for_scope(scope).get(pk=source.pk).next_sync_at


def set_next_sync_at(scope, source, when) -> None:
    with activate(scope):
        Source.objects.for_scope(scope).filter(pk=source.pk).update(next_sync_at=when)


def test_a_pass_syncs_the_due_sources_of_every_tenant_and_moves_their_next_sync_on(world, make_source, settings,
                                                                                   tmp_path_factory):
    scope, now = world["scope"], timezone.now()
    other = make_tenant("Other")
    other_scope = whole_tenant(other)
    other_folder = tmp_path_factory.mktemp("other-share")  # a folder of its own: the world's is granted to Acme
    (other_folder / "policy.md").write_text("# Policy\n\nOther's receipts are due within 60 days.")
    settings.SOURCES_FOLDER_ROOTS = [*settings.SOURCES_FOLDER_ROOTS, str(other_folder)]
    grant(other, "folder", str(other_folder))
    with activate(other_scope):
        other_corpus = Corpus.objects.create(tenant=other, name="Other handbook")
    never = make_source("Never synced", 60)  # no next_sync_at yet: due
    late = make_source("Late", 30)
    set_next_sync_at(scope, late, now - timedelta(minutes=1))
    early = make_source("Not yet", 60)
    set_next_sync_at(scope, early, now + timedelta(minutes=10))
    paused = make_source("Paused", 60, paused=True)
    on_demand = make_source("On demand", 0)
    elsewhere = make_source("Elsewhere", 15, scope=other_scope, corpus=other_corpus, path=other_folder)

    assert celery_app.conf.beat_schedule["schedule-source-syncs"]["task"] == schedule_source_syncs_task.name
    before = timezone.now()
    assert schedule_source_syncs_task.apply().get() == 3  # what beat runs every minute
    after = timezone.now()
    for s, sc in ((never, scope), (late, scope), (elsewhere, other_scope)):
        assert syncs_of(sc, s) == [("schedule", "done")]
        assert before + timedelta(minutes=s.schedule_minutes) <= next_sync_at(sc, s) <= after + timedelta(minutes=s.schedule_minutes)
    for s in (early, paused, on_demand):
        assert syncs_of(scope, s) == []
    assert next_sync_at(scope, early) == now + timedelta(minutes=10)
    assert next_sync_at(scope, paused) is None and next_sync_at(scope, on_demand) is None
    with activate(other_scope):  # the other tenant's sync ran as that tenant, into its corpus
        assert list(Document.objects.for_scope(other_scope).values_list("corpus_id", "status")) == [(other_corpus.pk, "ready")]

    assert schedule_due_sources() == []  # nothing is due again before its interval has passed
    started = schedule_due_sources(now=timezone.now() + timedelta(minutes=20))  # the 15-minute and the +10-minute ones
    assert len(started) == 2
    assert syncs_of(other_scope, elsewhere)[1:] == syncs_of(scope, early) == [("schedule", "done")]
    assert len(syncs_of(scope, never)) == len(syncs_of(scope, late)) == 1

    source_update(scope=scope, source=never, schedule_minutes=5)  # a new interval: due at the next pass
    assert len(schedule_due_sources()) == 1 and len(syncs_of(scope, never)) == 2
    assert next_sync_at(scope, never) <= timezone.now() + timedelta(minutes=5)


def test_a_pass_resends_a_queued_sync_whose_message_was_lost(world, make_source):
    scope = world["scope"]
    lost_source, fresh_source = make_source("Lost", 0), make_source("Fresh", 0)
    with activate(scope):  # queued rows whose task message never reached a worker
        lost = SourceSync.objects.create(tenant_id=scope.tenant_id, source=lost_source, status="queued")
        fresh = SourceSync.objects.create(tenant_id=scope.tenant_id, source=fresh_source, status="queued")
        SourceSync.objects.for_scope(scope).filter(pk=lost.pk).update(
            created_at=timezone.now() - timedelta(seconds=STALE_QUEUED_SECONDS + 60))
    assert schedule_due_sources() == []  # no source is due (on demand only): only the resend runs
    with activate(scope):
        assert SourceSync.objects.for_scope(scope).get(pk=lost.pk).status == "done"
        assert SourceSync.objects.for_scope(scope).get(pk=fresh.pk).status == "queued"  # its message may still come
        assert Document.objects.for_scope(scope).filter(source_name__startswith=f"folder:{lost_source.pk}:").count() == 1


def test_sync_sources_command_syncs_one_source_or_the_due_ones_and_loops_until_its_parent_is_gone(
        world, make_source, monkeypatch, settings, caplog):
    scope = world["scope"]
    share, paused = make_source("Share", 60), make_source("Paused", 60, paused=True)
    set_next_sync_at(scope, share, timezone.now() + timedelta(minutes=30))

    out = io.StringIO()
    call_command("sync_sources", source=share.pk, stdout=out)  # now, whatever its schedule
    assert syncs_of(scope, share) == [("manual", "done")] and out.getvalue().endswith(" queued\n")
    with pytest.raises(CommandError, match="paused"):
        call_command("sync_sources", source=paused.pk)
    with pytest.raises(CommandError, match="no source"):
        call_command("sync_sources", source=share.pk + 1000)

    due = make_source("Due", 60)
    out = io.StringIO()
    call_command("sync_sources", stdout=out)  # one pass
    assert syncs_of(scope, due) == [("schedule", "done")] and out.getvalue().startswith("queued 1 sync(s): ")
    assert syncs_of(scope, share) == [("manual", "done")]  # not due: the manual sync moved its next one on too

    # --loop: a failing pass is logged and the next pass goes on; it stops when its parent process is gone
    source_update(scope=scope, source=due, schedule_minutes=1)  # due again
    settings.SOURCES_SCHEDULER_INTERVAL_SECONDS = 1
    passes: list[int] = []

    def flaky_pass(**kwargs) -> list[int]:
        passes.append(1)
        if len(passes) == 1:
            raise OperationalError("the database is restarting")
        return schedule_due_sources(**kwargs)

    parent = os.getppid()
    monkeypatch.setattr(sync_sources_command, "schedule_due_sources", flaky_pass)
    monkeypatch.setattr(sync_sources_command.os, "getppid", lambda: parent if len(passes) < 2 else parent + 1)
    out = io.StringIO()
    call_command("sync_sources", loop=True, stdout=out)
    assert len(passes) == 2 and "source scheduler pass failed" in caplog.text
    assert syncs_of(scope, due) == [("schedule", "done")] * 2 and out.getvalue().startswith("queued 1 sync(s): ")
