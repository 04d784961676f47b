"""The database ENGINE for a DATABASE_URL: Django's PostgreSQL backend for tables keyed by tenant (base.py)."""
