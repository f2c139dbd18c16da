"""The ``gender`` protocol (Lyu et al. 2025): the gender an image's person presents, by people
and by gender detectors. See docs/explanation/protocols.md."""
