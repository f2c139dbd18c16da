from django.apps import AppConfig


class AttributesConfig(AppConfig):
    """The ``attributes`` protocol (GEP, Zhang et al. 2023)."""

    name = "protocols.attributes"
    label = "attributes"
    # Registers the protocol (``studies.protocols.PROTOCOLS``, keyed by the label).
    protocol_spec = "protocols.attributes.spec.SPEC"
    verbose_name = "Attributes protocol"
