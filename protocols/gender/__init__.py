"""The ``gender`` protocol (Lyu et al. 2025); see docs/explanation/protocols.md."""
