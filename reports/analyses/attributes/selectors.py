"""Moved to ``protocols.attributes.selectors`` (issue 20 §2: every protocol one package).

Kept only for ``estimates.attributes``, which imports these names from here until the estimates
rework imports them from the protocol package; then this module goes (``tests/test_layers.py``
lists it as a known exception to the layers)."""

from protocols.attributes.selectors import final_answers, gep_rows

__all__ = ["final_answers", "gep_rows"]
