"""Moved to ``protocols.pair_change`` (issue 20 §2); only ``selectors`` is kept here, for
``estimates.pair_change``, until the estimates rework imports the protocol package."""
