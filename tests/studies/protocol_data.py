"""Small manifests of each protocol and the "empty database" step of export → import round
trips, shared by the exchange tests and the end-to-end protocol tests."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model

from annotate.exports import ground_truth_export
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label, LabelRevision
from studies.models import Image, Item, ItemImage, Prompt, Question, Study
from tests.factories import png_bytes


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def one_image_manifest(
    tmp_path: Path, n: int, *, extra: dict[str, list[str]] | None = None
) -> tuple[Path, Path]:
    """``n`` generated images of two T2I models, four prompts in two categories, plus any
    ``extra`` metadata columns (one value per image); returns (manifest, root)."""
    root = tmp_path / "generated"
    root.mkdir()
    extra = extra or {}
    rows = []
    for i in range(n):
        (root / f"{i}.png").write_bytes(png_bytes(500 + i))
        category = "profession" if i % 2 else "trait"
        rows.append(
            [
                f"{i}.png",
                "sdxl" if i % 3 else "dalle",
                f"a photo of person {i % 4}",
                category,
                f"w{i % 4}",
                i,
                *(values[i] for values in extra.values()),
            ]
        )
    header = ["image", "t2i_model", "prompt", "category", "word", "seed", *extra]
    return write_csv(tmp_path / "manifest.csv", header, rows), root


def pair_manifest(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """``n`` seed/edit pairs: two seed photos shared by the pairs, one edit each."""
    root = tmp_path / "pairs"
    (root / "seeds").mkdir(parents=True)
    (root / "edits").mkdir()
    for s in range(2):
        (root / "seeds" / f"person_{s}.png").write_bytes(png_bytes(900 + s))
    rows = []
    for i in range(n):
        (root / "edits" / f"{i}.png").write_bytes(png_bytes(700 + i))
        item = f"pair_{i:02d}"
        rows.append([item, "input", f"seeds/person_{i % 2}.png", "", "", "", "", "", ""])
        word = ("lawyer", "nurse", "kind")[i % 3]
        rows.append(
            [
                item,
                "output",
                f"edits/{i}.png",
                "sd15-edit",
                f"make the person a {word}",
                "trait" if word == "kind" else "profession",
                word,
                100 + i,
                "profession" if word != "kind" else "personality",
            ]
        )
    header = ["item", "role", "image", "t2i_model", "prompt", "category", "word", "seed", "domain"]
    return write_csv(tmp_path / "pairs.csv", header, rows), root


def export_text(study: Study, fmt: str = "csv") -> str:
    return ground_truth_export(study=study, fmt=fmt)


def export_rows(study: Study) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(export_text(study))))


def empty_database(settings: Any, tmp_path: Path) -> None:
    """Delete every study, item, image, label and user, and start a fresh MEDIA_ROOT: what a
    new installation that only has the export file and the images looks like."""
    # Children first: Item.prompt is PROTECT, so a study cannot take its items along.
    for model in (FinalLabelRevision, FinalLabel, LabelRevision, Label, Assignment, Item):
        model.objects.all().delete()
    Study.objects.all().delete()
    Image.objects.all().delete()
    get_user_model().objects.all().delete()
    for model in (Study, Question, Prompt, Item, ItemImage, Image, Label, FinalLabel, get_user_model()):
        assert not model.objects.exists(), model
    settings.MEDIA_ROOT = tmp_path / "fresh-media"
    settings.MEDIA_ROOT.mkdir()
