from django.apps import AppConfig


class QuestionsConfig(AppConfig):
    """The ``questions`` protocol: single-choice questions compared across manifest groups."""

    name = "protocols.questions"
    label = "questions"
    verbose_name = "Questions protocol"
