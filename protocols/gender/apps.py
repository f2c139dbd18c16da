from django.apps import AppConfig


class GenderConfig(AppConfig):
    """The ``gender`` protocol (Lyu et al. 2025): the gender an image's person presents, bias scores per model and detector."""

    name = "protocols.gender"
    label = "gender"
    verbose_name = "Gender protocol"
