from django.apps import AppConfig

from tenants.process_hooks import register_warmup_step


class KbConfig(AppConfig):
    name = "kb"
    verbose_name = "Knowledge base"

    def ready(self) -> None:
        """Registers kb's visibility rules (kb.access) and its warm-up steps (kb.warm), which the project
        package's warm-up runs at process start."""
        # Imported in ready(), as Django requires: they import models, which exist only once apps are loaded.
        from kb import access, warm  # noqa: F401  (access registers the visibility rules of kb's models)

        register_warmup_step("models", warm.warm_models)
        register_warmup_step("parse_helper", warm.warm_parse_helper, web=False)
        register_warmup_step("search", warm.warm_search, worker=False)
