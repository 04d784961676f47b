from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    """The evaluation harness: no models, one management command (`evaluate`)."""

    name = "bench.evaluation"
    label = "evaluation"
    verbose_name = "Evaluation"
