"""An app whose ``protocol_spec`` names nothing, installed by the system-check tests."""

from django.apps import AppConfig


class BrokenSpecConfig(AppConfig):
    name = "tests.studies"
    label = "broken"
    protocol_spec = "tests.studies.broken_protocol.NO_SUCH_SPEC"
