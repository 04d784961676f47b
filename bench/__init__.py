"""Benchmarks (scripts run as files: `.venv/bin/python bench/<name>.py`) and the evaluation harness
(`bench.evaluation`, the Django app behind `manage.py evaluate`). Beside the product apps, above them:
nothing in tenants, kb, agents or api imports bench (the import contract in pyproject.toml)."""
