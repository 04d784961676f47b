"""The product's configuration, in the lowest layer so that every app reads it the same way.

- `environment`: every environment variable declared once (type, default, doc), parsed and validated;
- `product`: every product setting declared once (the Django-only ones there, the others linked to their
  environment variable) and read through one object, `product_settings.NAME` (exported here);
- `docs`: the configuration tables of README.md and docs/configuration.md, generated from the declarations
  (`python -m tenants.conf.docs --write`; tests/test_config_documented.py holds them equal).

The project package (`api/project/settings.py`) builds the Django settings from `environment`; the apps
read product settings only through `product_settings` (Django's own settings as `django.conf.settings`).
"""

from tenants.conf.product import product_settings

__all__ = ["product_settings"]
