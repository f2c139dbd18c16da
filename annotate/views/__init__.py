"""HTML screens of the human side, one module per job: ``labeling`` (the annotators' labeling
screen) and ``screen`` (what it draws); ``review`` (researchers: disputes, items, agreement);
``team`` (a study's annotators, users without a role); ``common`` (what they share).

Views check who may act, call ``annotate.services`` (writes) or ``annotate.selectors`` (reads)
and render. Choices, keys and question texts come from the Question rows.
"""
