"""Answer-quality evaluation, an app of its own beside the product apps: metrics (pure), datasets, the
suite's registry, the runner behind `manage.py evaluate`, reports. It uses the product only through its
public services (kb ingestion and retrieval, agents' strategies); the product never imports it."""
