"""The ``questions`` protocol: any study design from a questions CSV.

A researcher brings single-choice questions and a manifest column whose values are the groups to
compare (``create_study --protocol questions --questions F.csv --compare COLUMN``). People answer
every question on the core's multi-question screen; detectors answer with outputs of kind
``answers`` (``kinds``); the report (``analysis``, on ``metrics.questions``) compares answer
shares across groups, measures agreement and scores each detector; ``views`` is its drill-down.
"""
