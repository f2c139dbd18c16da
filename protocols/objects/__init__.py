"""The ``objects`` protocol (object co-occurrence, Mannering et al. 2023): which objects an
objects detector finds beside men and beside women, with people checking its boxes.

Everything of the protocol lives here, registered once by dotted path:

- ``spec.SPEC``: ``studies.protocols.PROTOCOLS["objects"]`` (questions, metadata check);
- ``services``: the box check (``manage.py prepare_box_check``);
- ``analysis.ObjectsAnalysis`` (``ProtocolSpec.analysis``), on ``metrics.objects``, with
  ``report``, ``selectors``, ``tables`` and ``charts``;
- ``views`` / ``urls`` / ``templates/objects/``: a class's images with their boxes;
- ``demo``: the demo study ``seed_demo`` builds.
"""
