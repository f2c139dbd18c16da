"""The ``attributes`` protocol (GEP, Zhang et al. 2023): 15 clothing attributes asked yes or no,
compared between images of women and men (the GEP vector), by people and by attribute
classifiers.

Everything of the protocol lives here, registered once by dotted path:

- ``spec.SPEC``: ``studies.protocols.PROTOCOLS["attributes"]`` (questions, metadata checks);
- ``analysis.AttributesAnalysis`` (``ProtocolSpec.analysis``), on ``metrics.gep``, with
  ``report``, ``selectors``, ``tables`` and ``charts``;
- ``views`` / ``urls`` / ``templates/attributes/``: an attribute's images in one setting;
- ``demo``: the demo study ``seed_demo`` builds.
"""
