"""The ``questions`` protocol: any study design from a questions CSV, answer shares compared
across the groups of one manifest column. See docs/explanation/protocols.md."""
