from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents and run traces"

    def ready(self) -> None:
        # Imported in ready(), as Django requires: these modules import models, which exist only once apps are loaded.
        from agents import access  # noqa: F401  (registers the visibility rules of agents' models)
        from agents.chain import revoke_changes_on_trace_tables
        from agents.providers import provider_report
        from tenants.process_hooks import register_health_report
        from tenants.rls import APPEND_ONLY_HOOKS

        register_health_report("providers", provider_report)  # /healthz: each configured provider's probed capabilities
        if revoke_changes_on_trace_tables not in APPEND_ONLY_HOOKS:
            APPEND_ONLY_HOOKS.append(revoke_changes_on_trace_tables)
