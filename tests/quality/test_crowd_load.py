"""bench/bench_crowd_load.py in small: five panel participants at once through one join link
over HTTP (pytest-django's threaded live server) on PostgreSQL, labelling a gold study to the
quota; the benchmark's own checks of seats, counters, finals and gold must all hold."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import pytest
from django.db import connection

pytestmark = [pytest.mark.live_server, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def test_five_participants_at_once_keep_every_invariant_of_the_load_benchmark(live_server, settings):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only (DATABASE_URL=postgres://...)")
    from bench_crowd_load import PanelParticipant, checks, make_crowd_study
    from bench_label_submit import Samples

    options = argparse.Namespace(images=60, labels_per_item=3, gold=6, gold_rate=0.2, quota=8)
    study, _warmer, join_path = make_crowd_study(options, Path(settings.MEDIA_ROOT))
    address = live_server.url.removeprefix("http://")
    people = [PanelParticipant(address, study.slug, f"pid-{i}") for i in range(5)]
    arrivals, presses = Samples(), Samples()
    threads = [
        threading.Thread(target=p.run, args=(join_path, 0.0, 0, i != 3, arrivals, presses, i))
        for i, p in enumerate(people)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert arrivals.errors == []
    assert presses.errors == []
    assert [len(p.items) for p in people] == [8] * 5
    results = checks(study, people, quota=8)
    assert [what for what, holds, _ in results if not holds] == [], results
