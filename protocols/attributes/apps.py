from django.apps import AppConfig


class AttributesConfig(AppConfig):
    """The ``attributes`` protocol (GEP, Zhang et al. 2023)."""

    name = "protocols.attributes"
    label = "attributes"
    verbose_name = "Attributes protocol"
