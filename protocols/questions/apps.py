from django.apps import AppConfig


class QuestionsConfig(AppConfig):
    """The ``questions`` protocol: single-choice questions compared across manifest groups."""

    name = "protocols.questions"
    label = "questions"
    # Registers the protocol (``studies.protocols.PROTOCOLS``, keyed by the label).
    protocol_spec = "protocols.questions.spec.SPEC"
    verbose_name = "Questions protocol"
