"""Answer-quality evaluation: metrics (pure), datasets, the runner behind `manage.py evaluate`, reports."""
