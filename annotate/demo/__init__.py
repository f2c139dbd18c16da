"""What every protocol's demo shares (``manage.py seed_demo``).

``photos``: the packaged photographs and their deterministic variants; ``seeding``: the demo
annotators, a demo study defined once, answers seeded where none are, and the ``ProtocolDemo``
contract. Each protocol's demo study lives in its package (``protocols/<name>/demo.py``: its
items and their metadata, the demo annotators' answers, and the demo predictions shipped for the
detectors that cannot run here).
"""
