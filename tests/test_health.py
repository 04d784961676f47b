import threading

import pytest
from django.http import HttpResponse

from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)


@pytest.mark.django_db
def test_healthz_reports_database_pgvector_and_broker(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["database"] == "ok"
    assert body["pgvector"].startswith("0.8")
    assert body["broker"] in {"eager", "ok"}


@pytest.fixture
def warm_state():
    from api.project import warmup

    yield warmup
    with warmup._lock:
        warmup._state.clear()
        warmup._state["status"] = "off"
        warmup._not_warming.set()


def test_while_warming_a_request_waits_for_the_warm_up_and_healthz_answers_at_once(rf, warm_state):
    """Issue 52: a web worker started with no warm sibling accepts while it warms up (so that /healthz
    answers 503 "warming" at once); every other request is held until the warm-up ends, never served cold."""
    served: list[str] = []
    gate = warm_state.WarmupGate(lambda request: served.append(request.path) or HttpResponse())
    gate(rf.get("/api/v1/corpora/"))  # no warm-up running: no wait
    warm_state.begin()
    held = threading.Thread(target=gate, args=(rf.get("/api/v1/corpora/"),))
    held.start()
    gate(rf.get("/healthz"))
    held.join(0.5)
    assert held.is_alive() and served == ["/api/v1/corpora/", "/healthz"]
    warm_state._end(status="ready")
    held.join(5)
    assert not held.is_alive() and served == ["/api/v1/corpora/", "/healthz", "/api/v1/corpora/"]


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_healthz_answers_503_warming_until_the_warm_up_is_done_then_ready(client, warm_state):
    """Issue 31: a process that warms up (gunicorn post_worker_init, Celery worker_process_init) is
    healthy only once its models, connections and search path are warm."""
    assert client.get("/healthz").json().get("warm_up") is None  # nothing started one: not waited for
    warm_state.begin()
    warming = client.get("/healthz")
    assert warming.status_code == 503 and warming.json()["status"] == "warming"
    done = warm_state.warm_up()
    assert done["status"] == "ready", done
    assert {"database_ms", "requests_ms", "search_ms"} <= set(done["timings"]) and any(k.startswith("model ") for k in done["timings"])
    ready = client.get("/healthz")
    assert ready.status_code == 200, ready.json()
    assert ready.json()["status"] == "ok" and ready.json()["warm_up"]["status"] == "ready"


@pytest.mark.django_db
def test_a_failed_warm_up_is_reported_and_the_process_stays_unhealthy(client, warm_state, monkeypatch):
    monkeypatch.setenv("GROUNDED_WARMUP_MODELS", "no-such-model:12")
    done = warm_state.warm_up(web=False)
    assert done["status"] == "failed" and "no-such-model" in done["error"]
    r = client.get("/healthz")
    assert r.status_code == 503 and r.json()["status"] == "degraded" and r.json()["warm_up"]["status"] == "failed"
