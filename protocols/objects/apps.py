from django.apps import AppConfig


class ObjectsConfig(AppConfig):
    """The ``objects`` protocol (Mannering et al. 2023)."""

    name = "protocols.objects"
    label = "objects"
    # Registers the protocol (``studies.protocols.PROTOCOLS``, keyed by the label).
    protocol_spec = "protocols.objects.spec.SPEC"
    # Registers its question kinds (``studies.kinds.question_kinds``).
    question_kinds = ("protocols.objects.kinds.BOXES", "protocols.objects.kinds.CLASSES")
    verbose_name = "Objects protocol"
