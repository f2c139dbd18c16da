from django.apps import AppConfig


class GenderConfig(AppConfig):
    """The ``gender`` protocol (Lyu et al. 2025): bias scores per T2I model and detector."""

    name = "protocols.gender"
    label = "gender"
    # Registers the protocol (``studies.protocols.PROTOCOLS``, keyed by the label).
    protocol_spec = "protocols.gender.spec.SPEC"
    verbose_name = "Gender protocol"
