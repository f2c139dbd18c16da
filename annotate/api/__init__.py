"""REST API of the human side, one view per action."""
