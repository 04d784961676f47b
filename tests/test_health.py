import pytest


@pytest.mark.django_db
def test_healthz_reports_database_pgvector_and_broker(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["database"] == "ok"
    assert body["pgvector"].startswith("0.8")
    assert body["broker"] in {"eager", "ok"}
