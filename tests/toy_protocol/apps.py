from django.apps import AppConfig


class ToyConfig(AppConfig):
    """The ``toy`` protocol, installed by the tests that need it (``modify_settings``)."""

    name = "tests.toy_protocol"
    label = "toy"
    # The one line that registers the protocol (``studies.protocols.PROTOCOLS["toy"]``).
    protocol_spec = "tests.toy_protocol.spec.SPEC"
