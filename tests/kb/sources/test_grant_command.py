"""`manage.py grant_source`: an operator grants a tenant folders and hosts through the owner connection,
logged on grounded.operator; a folder that equals, contains or is inside another tenant's grant is
refused with a clear message and a non-zero exit (issue 47, finding 1)."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import CommandError, call_command

from kb.sources.grants import grants_of
from tests.factories import make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

# The command writes through the owner connection and commits: the app role sees it only when the
# test does not hold its own transaction open.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("grant_source", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_an_operator_grants_lists_and_revokes_and_overlaps_are_refused(settings, tmp_path, log_records):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    for name in ("acme", "acme/inner", "globex"):
        (tmp_path / name).mkdir()
    (tmp_path / "link-to-acme").symlink_to(tmp_path / "acme")
    acme, globex = make_tenant("Acme"), make_tenant("Globex")
    assert "granted folder" in run("--tenant", acme.slug, "--folder", str(tmp_path / "acme"))
    assert any(r.name == "grounded.operator" and r.levelno == logging.INFO and "grant_source" in r.getMessage()
               and acme.slug in r.getMessage() for r in log_records)
    assert [g.value for g in grants_of(acme.id, "folder")] == [str(tmp_path / "acme")]
    assert grants_of(globex.id) == []  # the application role sees only its tenant's grants

    for folder, how in ((tmp_path / "acme", "is"), (tmp_path / "acme" / "inner", "is inside"), (tmp_path, "contains"),
                        (tmp_path / "link-to-acme", "is")):
        with pytest.raises(CommandError, match=f"refused: .* {how} {tmp_path / 'acme'}, granted to tenant '{acme.slug}'"):
            run("--tenant", globex.slug, "--folder", str(folder))
    with pytest.raises(CommandError, match="SOURCES_FOLDER_ROOTS"):
        run("--tenant", globex.slug, "--folder", "/etc")
    assert grants_of(globex.id) == []

    run("--tenant", globex.slug, "--folder", str(tmp_path / "globex"))
    run("--tenant", globex.slug, "--website-host", "https://wiki.globex.example/", "--allow-private")
    listed = run("--tenant", globex.slug)
    assert f"folder\t{tmp_path / 'globex'}" in listed and "website_host\twiki.globex.example private-allowed" in listed
    assert "revoked" in run("--tenant", acme.slug, "--revoke", "--folder", str(tmp_path / "acme"))
    assert grants_of(acme.id) == []
    run("--tenant", globex.slug, "--folder", str(tmp_path / "acme" / "inner"))  # free once revoked
    with pytest.raises(CommandError, match="no tenant"):
        run("--tenant", "nobody", "--folder", str(tmp_path))
