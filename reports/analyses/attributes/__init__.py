"""Moved to ``protocols.attributes`` (issue 20 §2); only ``selectors`` is kept here, for
``estimates.attributes``, until the estimates rework imports the protocol package."""
