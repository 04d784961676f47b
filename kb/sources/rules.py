"""Department mapping rules: which department an item's document belongs to. Pure: no ORM."""

from __future__ import annotations

_UNSET = object()


def normalise_rules(rules: object) -> list[dict]:
    """Check and normalise `[{"prefix": str, "department": int | None}, ...]`; raises ValueError naming the problem."""
    if rules in (None, ""):
        return []
    if not isinstance(rules, list):
        raise ValueError("department rules must be a list of {\"prefix\": ..., \"department\": id or null}")
    out, seen = [], set()
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) - {"prefix", "department"} or "prefix" not in rule:
            raise ValueError(f"rule {i}: expected {{\"prefix\": ..., \"department\": id or null}}")
        prefix, dept = rule["prefix"], rule.get("department")
        if not isinstance(prefix, str) or len(prefix) > 1000:
            raise ValueError(f"rule {i}: prefix must be a string of at most 1000 characters")
        if dept is not None and (isinstance(dept, bool) or not isinstance(dept, int) or dept <= 0):
            raise ValueError(f"rule {i}: department must be a department id or null (tenant-wide)")
        if prefix in seen:
            raise ValueError(f"rule {i}: prefix {prefix!r} appears twice")
        seen.add(prefix)
        out.append({"prefix": prefix, "department": dept})
    return sorted(out, key=lambda r: -len(r["prefix"]))


def department_for(key: str, rules: list[dict], default: int | None) -> int | None:
    """The department of the longest rule prefix that `key` starts with; `default` when none matches."""
    for rule in sorted(rules, key=lambda r: -len(r["prefix"])):
        if key.startswith(rule["prefix"]):
            return rule["department"]
    return default
