"""Study protocols that live in a package of their own: spec, analysis, pages, docs.

Each package is one protocol, registered once by dotted path (``studies.protocols.PROTOCOLS``,
``reports.analyses.ANALYSES``, ``detectors.kinds`` for its output kinds) and installed as a
Django app so its templates and commands are found.
"""
