#!/usr/bin/env python
"""Django's command-line utility for grounded."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
    from django.core.exceptions import ImproperlyConfigured

    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # One clear line naming the setting, not a traceback.
        print(f"configuration error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
