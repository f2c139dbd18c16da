"""The ``questions`` protocol: any study design from a questions CSV.

A researcher brings single-choice questions (``key,text,choices``) and a manifest column whose
values are the groups to compare (``create_study --protocol questions --questions F.csv
--compare COLUMN``). People answer every question of an image on one screen; detectors (a VQA
model, an LLM judge) answer with outputs of kind ``answers``; the report compares answer shares
across groups (Wilson intervals, χ² test of independence, Cramér's V, largest gap), measures
agreement and scores each detector against the final labels.

Everything of the protocol lives here, registered once (``apps.QuestionsConfig.protocol_spec``,
the app being in ``INSTALLED_APPS``):

- ``spec.SPEC``: ``studies.protocols.PROTOCOLS["questions"]`` (questions rule, ``--compare``),
  naming the rest by dotted path;
- ``kinds``: the ``answers`` output kind, named by the spec (``kind_validators``,
  ``kind_checks``), which ``detectors.kinds`` reads;
- ``analysis.QuestionsAnalysis`` (``ProtocolSpec.analysis``), on
  ``metrics.questions``, with ``report``, ``selectors`` and ``charts``;
- ``views`` / ``urls`` / ``templates/questions/``: the drill-down page (``ProtocolSpec.urls``);
- the labeling screen is the core's multi-question screen: nothing of its own.
"""
