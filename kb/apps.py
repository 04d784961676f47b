from django.apps import AppConfig


class KbConfig(AppConfig):
    name = "kb"
    verbose_name = "Knowledge base"

    def ready(self) -> None:
        # Imported in ready(), as Django requires: it imports models, which exist only once apps are loaded.
        from kb import access  # noqa: F401  (registers the visibility rules of kb's models)
