from django.apps import AppConfig


class PairChangeConfig(AppConfig):
    """The ``pair_change`` protocol (BiasPainter, Wang et al. 2024)."""

    name = "protocols.pair_change"
    label = "pair_change"
    verbose_name = "Pair-change protocol"
