from django.apps import AppConfig


class PairChangeConfig(AppConfig):
    """The ``pair_change`` protocol (BiasPainter, Wang et al. 2024)."""

    name = "protocols.pair_change"
    label = "pair_change"
    # Registers the protocol (``studies.protocols.PROTOCOLS``, keyed by the label).
    protocol_spec = "protocols.pair_change.spec.SPEC"
    verbose_name = "Pair-change protocol"
