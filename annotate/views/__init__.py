"""HTML screens of the human side: ``labeling`` (annotators) and ``screen`` (what it draws),
``review`` (disputes, items, agreement), ``team`` (annotators, users without a role), ``common``."""
