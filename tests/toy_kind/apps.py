from django.apps import AppConfig


class ToyKindConfig(AppConfig):
    """The ``rating`` question kind, installed by the tests that need it (``modify_settings``)."""

    name = "tests.toy_kind"
    label = "toy_kind"
    # The one line that registers the kind (``studies.kinds.question_kinds()["rating"]``).
    question_kinds = ("tests.toy_kind.kinds.RATING",)
