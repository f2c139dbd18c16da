from django.apps import AppConfig


class ObjectsConfig(AppConfig):
    """The ``objects`` protocol (Mannering et al. 2023)."""

    name = "protocols.objects"
    label = "objects"
    verbose_name = "Objects protocol"
