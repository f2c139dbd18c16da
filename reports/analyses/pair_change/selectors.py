"""Moved to ``protocols.pair_change.selectors`` (issue 20 §2: every protocol one package).

Kept only for ``estimates.pair_change``, which imports these names from here until the estimates
rework imports them from the protocol package; then this module goes (``tests/test_layers.py``
lists it as a known exception to the layers)."""

from protocols.pair_change.selectors import QuestionMismatch, human_labels

__all__ = ["QuestionMismatch", "human_labels"]
