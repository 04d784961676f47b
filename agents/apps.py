from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents and run traces"

    def ready(self) -> None:
        from agents import access  # noqa: F401  (registers the visibility rules of agents' models)
        from agents.chain import revoke_changes_on_trace_tables
        from tenants.rls import APPEND_ONLY_HOOKS

        if revoke_changes_on_trace_tables not in APPEND_ONLY_HOOKS:
            APPEND_ONLY_HOOKS.append(revoke_changes_on_trace_tables)
