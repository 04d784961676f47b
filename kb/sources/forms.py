"""The admin's source form: no JSON to type. Each kind's settings are form fields generated from the kind's
declaration (its connector's FIELDS, kb.sources.kinds), department rules are rows of a prefix and a department
picked by name, and everything is checked by the services the API calls (kb.sources.services: one copy of each
rule). Before a save the connection is tested (kb.sources.kinds.check_connection): a source that cannot be
listed shows the error on the setting at fault and is not saved.

`source_form(...)` builds the form class for one request: the departments offered are the admin's own
(kb.sources.selectors.grantable_departments), and the number of rule rows fits the source's rules."""

from __future__ import annotations

from typing import Any

from django import forms

from kb.models import Source
from kb.sources.base import ConfigField
from kb.sources.crypto import decrypt_secret
from kb.sources.kinds import CONNECTORS, check_connection, fault_field, kind_fields
from kb.sources.services import check_source_config, check_source_rules, check_source_secret, credential_origin
from tenants.models import Department
from tenants.scope import NotAllowed, Scope, activate

EXTRA_RULE_ROWS = 3
TEST_BUTTON = "_test_connection"  # the submit button that tests the connection without saving
TENANT_WIDE = "tenant"  # a rule's department choice: tenant-wide (no department)


def setting_field(kind: str, name: str) -> str:
    """The form field of `kind`'s declared setting `name` ("folder_path", "s3_bucket", ...)."""
    return f"{kind}_{name}"


def kind_setting_fields(kind: str) -> list[str]:
    return [setting_field(kind, f.name) for f in kind_fields(kind)]


def rule_fields(rows: int) -> list[str]:
    return [name for i in range(rows) for name in (f"rule_prefix_{i}", f"rule_department_{i}")]


def _form_field(decl: ConfigField) -> forms.Field:
    common: dict[str, Any] = {"required": False, "label": decl.label,
                              "help_text": ("Required. " if decl.required else "") + decl.help}
    if decl.secret:
        common["help_text"] += " Stored encrypted, never shown again; leave empty to keep the stored one."
        return forms.CharField(max_length=4000, strip=False, widget=forms.PasswordInput(render_value=False), **common)
    if decl.type == "bool":
        return forms.BooleanField(**common)
    if decl.type == "int":
        return forms.IntegerField(**common)
    if decl.type == "float":
        return forms.FloatField(**common)
    return forms.CharField(max_length=2000, widget=forms.TextInput(attrs={"class": "vTextField"}), **common)


class SourceForm(forms.ModelForm):
    """Set by source_form: `scope` (None for a superuser: the corpus's tenant then), `rule_rows`."""

    scope: Scope | None = None
    rule_rows = 0
    clear_credentials = forms.BooleanField(required=False, help_text="Remove the stored credentials.")

    class Meta:
        model = Source
        # The corpus too, from the admin's fieldsets: its choices need the request (ModelAdmin.formfield_for_foreignkey).
        fields = ["name", "kind", "schedule_minutes", "paused"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection_note = ""
        self.testing_only = self.is_bound and TEST_BUTTON in self.data
        if self.instance.pk:
            for decl in kind_fields(self.instance.kind):
                name = setting_field(self.instance.kind, decl.name)
                if name in self.fields and not decl.secret and decl.name in (self.instance.config or {}):
                    self.fields[name].initial = self.instance.config[decl.name]
        for i, rule in enumerate(self.instance.department_rules or []):
            if f"rule_prefix_{i}" in self.fields:
                self.fields[f"rule_prefix_{i}"].initial = rule.get("prefix", "")
                dept = rule.get("department")
                self.fields[f"rule_department_{i}"].initial = TENANT_WIDE if dept is None else str(dept)

    def is_valid(self) -> bool:
        """As a save would check it; after the "Test connection" button, False even when all is well, so nothing
        is saved (the page shows the test's result; `errors` stays empty when it passed)."""
        return super().is_valid() and not self.testing_only

    # --- checks ----------------------------------------------------------------------------------

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        kind = self.instance.kind if self.instance.pk else data.get("kind")
        corpus = self.instance.corpus if self.instance.pk else data.get("corpus")
        if not kind or corpus is None:
            return data
        scope = self.scope or Scope.system(corpus.tenant_id, principal="admin")  # a superuser: the corpus's tenant
        with activate(scope):  # the grants and departments are read under the tenant's row-level security
            data["config"] = self._config(kind, data, scope.tenant_id)
            data["credentials"] = self._credentials(kind, data)
            data["department_rules"] = self._rules(scope, corpus, data)
            if not self.errors and self._needs_test(kind):
                self._test(kind, data, scope.tenant_id)
        return data

    def _blame(self, kind: str, exc: NotAllowed) -> None:
        name = setting_field(kind, fault_field(kind, str(exc)))
        self.add_error(name if name in self.fields else None, str(exc))

    def _config(self, kind: str, data: dict, tenant_id: int) -> dict | None:
        config = {}
        for decl in kind_fields(kind):
            value = data.get(setting_field(kind, decl.name))
            if not decl.secret and value not in (None, ""):
                config[decl.name] = value
        try:
            return check_source_config(kind, config, tenant_id=tenant_id)
        except NotAllowed as exc:
            self._blame(kind, exc)
            return None

    def _credentials(self, kind: str, data: dict) -> dict | None:
        """The checked credentials typed, {} to remove the stored ones, None to keep them."""
        if data.get("clear_credentials"):
            return {}
        typed = {d.name: data[setting_field(kind, d.name)] for d in kind_fields(kind)
                 if d.secret and data.get(setting_field(kind, d.name))}
        if not typed:
            return None
        try:
            return check_source_secret(kind, typed)
        except NotAllowed as exc:
            self._blame(kind, exc)
            return None

    def _rules(self, scope: Scope, corpus: Any, data: dict) -> list[dict] | None:
        rules, rows = [], []
        for i in range(self.rule_rows):
            prefix, dept = data.get(f"rule_prefix_{i}") or "", data.get(f"rule_department_{i}") or ""
            if not dept:
                if prefix:
                    self.add_error(f"rule_department_{i}", "pick a department (or tenant-wide) for this prefix")
                continue
            rules.append({"prefix": prefix, "department": None if dept == TENANT_WIDE else int(dept)})
            rows.append(i)
        try:
            return check_source_rules(scope, corpus, rules)
        except NotAllowed as exc:
            text = str(exc)
            at = next((i for i, r in zip(rows, rules, strict=True) if str(r["department"]) in text or repr(r["prefix"]) in text),
                      rows[0] if rows else None)
            self.add_error(f"rule_department_{at}" if at is not None else None, text)
            return None

    def _needs_test(self, kind: str) -> bool:
        settings = set(kind_setting_fields(kind)) | {"clear_credentials"}
        return self.testing_only or not self.instance.pk or bool(settings & set(self.changed_data))

    def _test(self, kind: str, data: dict, tenant_id: int) -> None:
        """List a few items with what is about to be saved; an error on the setting at fault otherwise."""
        secret = data["credentials"]
        if secret is None:  # the stored credentials, if they still apply to the (maybe new) address
            same = self.instance.pk and credential_origin(kind, self.instance.config) == credential_origin(kind, data["config"])
            secret = decrypt_secret(self.instance.secret) if same and self.instance.secret else {}
        try:
            self.connection_note = check_connection(tenant_id=tenant_id, kind=kind, config=data["config"],
                                                    secret=secret).summary()
        except NotAllowed as exc:
            self._blame(kind, exc)


def source_form(*, scope: Scope | None, departments: list[Department], rule_rows: int) -> type[SourceForm]:
    """The form class for one request: every kind's settings, `rule_rows` rule rows offering `departments`."""
    labels = [(str(d.pk), d.name if scope is not None else str(d)) for d in departments]
    choices = [("", "—"), (TENANT_WIDE, "tenant-wide (every department)"), *labels]
    attrs: dict[str, Any] = {"scope": scope, "rule_rows": rule_rows, "__module__": __name__}
    for kind in CONNECTORS:
        for decl in kind_fields(kind):
            attrs[setting_field(kind, decl.name)] = _form_field(decl)
    for i in range(rule_rows):
        attrs[f"rule_prefix_{i}"] = forms.CharField(
            required=False, max_length=1000, strip=False, label=f"Rule {i + 1}: items starting with",
            help_text='e.g. "hr/" (folder, S3) or "/hr/" (website); empty: every item.' if i == 0 else "")
        attrs[f"rule_department_{i}"] = forms.ChoiceField(
            required=False, choices=choices, label="go to department",
            help_text="Longest prefix wins; an item no rule matches goes to the corpus's department." if i == 0 else "")
    return type("SourceForm", (SourceForm,), attrs)


def rule_rows_for(source: Source | None) -> int:
    return len(source.department_rules or []) + EXTRA_RULE_ROWS if source is not None else EXTRA_RULE_ROWS
