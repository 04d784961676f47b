"""Template filters that show a run's stored JSON (scope, tool arguments, filters) as words.

The trace stores these as JSON objects; an auditor reads "role: admin · all departments: yes", not
a Python dict's repr. Only presentation: the values shown are the stored ones, none left out.
"""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def readable(value: Any) -> str:
    """A JSON value as words: an object as "key: value · key: value" (keys with underscores spaced),
    a list as "a, b", booleans as yes/no, nothing as "none"."""
    return _words(value, top=True)


def _words(value: Any, *, top: bool = False) -> str:
    if isinstance(value, dict):
        if not value:
            return "none"
        parts = [f"{str(k).replace('_', ' ')}: {_words(v)}" for k, v in value.items()]
        return " · ".join(parts) if top else "(" + "; ".join(parts) + ")"
    if isinstance(value, list | tuple):
        return ", ".join(_words(v) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == "":
        return "none"
    return str(value)
