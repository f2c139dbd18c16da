"""A toy protocol defined only under ``tests/``: proof that a protocol is one unit,
registered once. See ``test_end_to_end`` for the list of its files."""
