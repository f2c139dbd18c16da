"""The demo's data, one module per protocol (``manage.py seed_demo`` builds the studies from it).

``photos``: the packaged photographs and their deterministic variants; ``attributes``, ``pairs``
and ``objects``: each protocol's demo study — its items and their metadata, the demo annotators'
answers, and (``data/``) the demo predictions shipped for the detectors that cannot run here.
The gender demo lives in the command itself, where it began.
"""
