from django.apps import AppConfig


class ObjectsConfig(AppConfig):
    """The ``objects`` protocol (Mannering et al. 2023)."""

    name = "protocols.objects"
    label = "objects"
    # Registers the protocol (``studies.protocols.PROTOCOLS``, keyed by the label).
    protocol_spec = "protocols.objects.spec.SPEC"
    verbose_name = "Objects protocol"
