"""The ``pair_change`` protocol (BiasPainter, Wang et al. 2024): an item is a pair (a seed
photo and its edit); detectors measure age, gender and skin tone of both, people check a
stratified sample of the automatic verdicts, and the report scores each word's change.

Everything of the protocol lives here, registered once by dotted path:

- ``spec.SPEC``: ``studies.protocols.PROTOCOLS["pair_change"]`` (questions, image roles);
- ``sampling``: the measured pairs and the stratified draw (``manage.py sample_pairs``);
- ``analysis.PairChangeAnalysis`` (``ProtocolSpec.analysis``), on ``metrics.pair_change``, with
  ``report``, ``selectors``, ``tables`` and ``charts``;
- ``views`` / ``urls`` / ``templates/pair_change/``: a word's pairs side by side;
- ``demo``: the demo study ``seed_demo`` builds.
"""
