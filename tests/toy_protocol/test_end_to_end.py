"""A protocol defined only under ``tests/`` is registered and runs end to end with no edit
outside ``tests/``: ``create_study --protocol toy``, ``import_images`` of a
manifest with real PNGs, ``import_predictions`` of its own output kind ``mood``, two
annotators labelling through the HTTP labeling screen (as its htmx form posts it), ``bias_report
--format json`` giving the toy analysis's counts, ``export_ground_truth``, and its report pages.

Every file the toy protocol needed, all under ``tests/toy_protocol/``:

- ``__init__.py`` — the package;
- ``apps.py`` — its ``AppConfig``, whose ``protocol_spec`` registers it (installing the app is
  registering the protocol; these tests install it with ``modify_settings``);
- ``spec.py`` — its ``ProtocolSpec``: the ``mood`` question preset, its output kind ``mood``
  with validator and study check, its analysis and URLconf by dotted path;
- ``kinds.py`` — the ``mood`` kind's validator and its check against a study's questions;
- ``analysis.py`` — its ``Analysis``: final answers per T2I model, detector answers counted;
- ``urls.py`` and ``views.py`` — its one page (``reports:toy_counts``);
- ``templates/toy/overview.html`` — its report overview page;
- ``test_end_to_end.py`` — this module.

The same spec registered at run time alone (``studies.protocols.protocol_registered``, no app)
brings its kinds, analysis and page, and takes them away after.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from types import MappingProxyType

import pytest
from django.core.management import CommandError, call_command
from django.test import modify_settings
from django.urls import NoReverseMatch, reverse

from annotate.models import FinalLabel, Label
from detectors.kinds import KINDS, OutputInvalid, output_validate
from detectors.models import Prediction
from reports.analyses import ANALYSES
from studies.models import Item, Study
from studies.protocols import PROTOCOLS, protocol_registered
from tests.studies.protocol_data import one_image_manifest, write_csv
from tests.toy_protocol.spec import SPEC

pytestmark = pytest.mark.django_db

#: What both annotators answer per image (``<i>.png``); ben says "sad" on 5.png: a dispute.
MOODS = ["happy", "sad", "happy", "neutral", "sad", "happy"]
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def toy_installed() -> Iterator[None]:
    """The toy app installed: the only thing that registers the protocol."""
    assert "toy" not in PROTOCOLS
    with modify_settings(INSTALLED_APPS={"append": "tests.toy_protocol"}):
        yield
    assert "toy" not in PROTOCOLS


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _shown(html: str) -> tuple[int, str] | None:
    """(item id, image key) of the item the labeling screen shows, None when the queue is done."""
    match = re.search(r'id="current-image"[^>]*data-item-id="(\d+)"', html)
    if not match:
        return None
    item_id = int(match.group(1))
    return item_id, Item.objects.get(pk=item_id).key


def _label_all(client, slug: str, answer_of) -> int:
    """Label every item the screen offers, as its htmx form does: read the form's hidden fields,
    post them with the answer and the htmx header; each answer returns the next item."""
    html = client.get(reverse("annotate:label_study", args=[slug])).content.decode()
    done = 0
    while (shown := _shown(html)) is not None:
        item_id, key = shown
        hidden = dict(re.findall(r'type="hidden" name="([a-z_]+)" value="([^"]*)"', html))
        response = client.post(
            reverse("annotate:label_submit", args=[slug, item_id]),
            hidden | {"answer_mood": answer_of(key)},
            **HTMX,
        )
        assert response.status_code == 200, response.content.decode()
        html = response.content.decode()
        done += 1
    return done


def test_the_toy_protocol_runs_end_to_end(
    toy_installed, tmp_path, client_for, annotator_a, annotator_b, researcher
):
    assert "mood" in KINDS
    assert ANALYSES["toy"] == "tests.toy_protocol.analysis.ToyAnalysis"
    out = command("create_study", "toy", "--protocol", "toy")
    assert out.startswith("Created study 'toy' (toy, 1 question(s), 2 labels per item"), out
    study = Study.objects.get(slug="toy")
    assert study.get_protocol_display() == "Toy: moods counted per model"

    path, root = one_image_manifest(tmp_path, len(MOODS))  # 0, 3: dalle; 1, 2, 4, 5: sdxl
    assert "accepted: 6 images" in command(
        "import_images", "--manifest", str(path), "--root", str(root), "--study", "toy"
    )

    # Detectors answer with the protocol's own kind; a wrong shape or answer is refused per line.
    predictions = [
        ["0.png", "moodnet", "mood", json.dumps({"mood": "happy"})],
        ["1.png", "moodnet", "mood", json.dumps({"mood": "angry"})],
        ["2.png", "moodnet", "mood", json.dumps({"colour": "red"})],
    ]
    with pytest.raises(CommandError) as caught:
        command(
            "import_predictions",
            str(write_csv(tmp_path / "bad.csv", ["image", "detector", "kind", "output"], predictions)),
            "--study",
            "toy",
        )
    assert "line 3" in str(caught.value)
    assert "unknown answer 'angry'" in str(caught.value)
    assert "line 4" in str(caught.value)
    assert "line 2" not in str(caught.value)
    said = ["happy", "sad", "happy", "happy", "happy", "happy"]
    rows = [[f"{i}.png", "moodnet", "mood", json.dumps({"mood": mood})] for i, mood in enumerate(said)]
    command(
        "import_predictions",
        str(write_csv(tmp_path / "p.csv", ["image", "detector", "kind", "output"], rows)),
        "--study",
        "toy",
    )
    assert Prediction.objects.filter(kind="mood").count() == 6

    study.annotators.add(annotator_a, annotator_b)
    anna, ben = client_for(annotator_a), client_for(annotator_b)
    assert _label_all(anna, "toy", lambda key: MOODS[int(key.split(".")[0])]) == 6
    assert _label_all(ben, "toy", lambda key: "sad" if key == "5.png" else MOODS[int(key.split(".")[0])]) == 6
    assert Label.objects.filter(item__study=study).count() == 12
    assert FinalLabel.objects.filter(item__study=study).count() == 5  # 5.png is disputed

    report = json.loads(command("bias_report", "--study", "toy", "--format", "json"))
    assert report == {
        "final": {
            "dalle": {"happy": 1, "sad": 0, "neutral": 1},
            "sdxl": {"happy": 1, "sad": 2, "neutral": 0},
        },
        # moodnet matches the final answer on 0, 1, 2 (not 3: neutral, 4: sad); 5 has none.
        "detectors": {"moodnet": {"n": 5, "agrees": 3, "happy": 5, "sad": 1, "neutral": 0}},
    }

    target = tmp_path / "ground_truth.csv"
    command("export_ground_truth", "--study", "toy", "--output", str(target))
    exported = {
        row["image"].rpartition("/")[2]: row["final_label"]
        for row in csv.DictReader(target.open(encoding="utf-8"))
        if row["question"] == "mood"
    }
    assert exported == {
        "0.png": "happy",
        "1.png": "sad",
        "2.png": "happy",
        "3.png": "neutral",
        "4.png": "sad",
        "5.png": "",
    }

    rita = client_for(researcher)
    page = rita.get(reverse("reports:overview") + "?study=toy")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Moods per model" in html
    assert re.search(r'data-model="sdxl">.*?data-mood="sad">2<', html, re.S)
    counts = rita.get(reverse("reports:toy_counts") + "?study=toy")
    assert counts.status_code == 200
    assert counts.json()["sdxl"] == {"happy": 1, "sad": 2, "neutral": 0}


def test_registered_at_run_time_and_taken_out_after():
    assert "toy" not in PROTOCOLS
    with protocol_registered("tests.toy_protocol.spec.SPEC") as key:
        assert key == "toy"
        assert list(PROTOCOLS)[-1] == "toy"
        assert output_validate("mood", {"mood": "sad"}) == {"mood": "sad"}
        assert ANALYSES["toy"] == "tests.toy_protocol.analysis.ToyAnalysis"
        assert reverse("reports:toy_counts") == "/reports/toy/counts/"
        command("create_study", "toy", "--protocol", "toy")
        assert Study.objects.get(slug="toy").questions.get().key == "mood"
    assert "toy" not in PROTOCOLS
    assert "mood" not in KINDS
    assert "toy" not in ANALYSES
    with pytest.raises(OutputInvalid, match="kind: must be one of"):
        output_validate("mood", {"mood": "sad"})
    with pytest.raises(NoReverseMatch):
        reverse("reports:toy_counts")


def test_a_kind_defined_by_two_protocols_is_refused_naming_both():
    clash = replace(
        SPEC,
        key="clash",
        kind_validators=MappingProxyType({"answers": "tests.toy_protocol.kinds.validate_mood"}),
    )
    with (
        protocol_registered(clash),
        pytest.raises(ValueError, match="'answers' of protocol 'clash' is defined by questions"),
    ):
        output_validate("answers", {"age": "young"})
    assert output_validate("answers", {"age": "young"}) == {"answers": {"age": "young"}}
