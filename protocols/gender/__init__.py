"""The ``gender`` protocol (Lyu et al. 2025): the gender the person of an image presents, by
people and by gender detectors; the report is the paper's bias scores per T2I model, prompt and
detector, with the detectors' filtering and accuracy.

Everything of the protocol lives here, registered once by dotted path:

- ``spec.SPEC``: ``studies.protocols.PROTOCOLS["gender"]`` (the ``gender`` question);
- ``analysis.GenderAnalysis`` (``ProtocolSpec.analysis``), on ``metrics.gender``, with
  ``report``, ``contract``, ``selectors``, ``tables``, ``charts`` and ``drilldown``;
- ``views`` / ``urls`` / ``templates/gender/``: the heatmap, prompt and detector pages;
- the output kind ``gender`` is the gender detectors' own (``detectors.kinds``).
"""
