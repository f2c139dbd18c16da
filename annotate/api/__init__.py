"""REST API of the human side, one view per action. Annotators reach only their own labels and seats
(404 otherwise); researcher-only endpoints answer 403."""
