"""Moved to ``protocols.pair_change.sampling`` (issue 20 §2: every protocol one package).

Kept only for ``estimates.pair_change``, which imports these names from here until the estimates
rework imports them from the protocol package; then this module goes (``tests/test_layers.py``
lists it as a known exception to the layers)."""

from protocols.pair_change.sampling import MeasureSourceError, pair_measurements, study_thresholds

__all__ = ["MeasureSourceError", "pair_measurements", "study_thresholds"]
