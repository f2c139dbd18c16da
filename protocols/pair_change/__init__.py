"""The ``pair_change`` protocol (BiasPainter, Wang et al. 2024): an item is a seed photo and
its edit; detectors measure both, people check a sample of the verdicts."""
