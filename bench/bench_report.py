"""Benchmark of the gender report (``bias_report``), on the study schema: items,
their image files, final labels per (item, question), predictions per image file.

Targets: the full report for 6,000 images x 8 detectors under 1 s; for 1,000,000 predictions
under 10 s. The script builds a throw-away test database, fills it with simulated labels and
predictions, times the report, prints the figures and drops the database.

Run from the repository root:

    # SQLite (the embedded default): a temporary database file, removed afterwards
    .venv/bin/python bench/bench_report.py

    # PostgreSQL: Django's test database "test_<name>" is created on that server and dropped
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/biaslab_bench .venv/bin/python bench/bench_report.py

Options: ``--images 6000`` (small case, rows written with ``bulk_create``), ``--big-images
125000`` (x 8 detectors = 1,000,000 predictions; 0 skips it), ``--detectors 8``, ``--repeat
3``, ``--bootstrap 1000``. The big case is written with PostgreSQL ``COPY`` or SQLite
``executemany`` because ``bulk_create`` of a million rows takes minutes on a 2-core machine.

Pages (``--no-pages`` skips them): each dashboard page and download as a logged-in
researcher's ``Client().get`` -- cold (report cache cleared first: the first request after a
write) and warm (the same request again, served from the cache) -- and a first visit after a
write: overview, its chart, the heatmap, its histogram, in the order a browser asks for them.
Every figure is printed with the load average (other work on the machine slows it).

Data: 3 T2I models x 100 prompts (the paper's design; the big case has ~417 images per prompt
instead of 20), one-image items (Item + Image + ItemImage of role "image"), final labels of the
gender question drawn with 12 % low quality and a per-prompt male share, two annotator labels per
item (90 % agreement), and detectors with different recall, filter rate and accuracy, whose
predictions belong to the image files (verdict in ``output["label"]``). Each timing is the report as ``manage.py bias_report`` computes it (SQL
aggregation + 1,000 bootstrap replicates per interval); the SQL-only time (``bootstrap=0``) is
printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402

from annotate.models import FinalLabel, FinalLabelSource, Label  # noqa: E402
from detectors.kinds import KIND_GENDER  # noqa: E402
from detectors.models import Prediction  # noqa: E402
from reports.analyses import analysis_for  # noqa: E402
from reports.selectors import Scope  # noqa: E402
from studies import permissions  # noqa: E402
from studies.models import Image, ImageRole, Item, ItemImage, Prompt, Question, Study  # noqa: E402
from studies.protocols import protocol_spec  # noqa: E402

MODELS = ("sdxl", "sd3", "dreamlike")
CATEGORIES = (("profession", 40), ("personality", 30), ("activity", 10), ("object", 10), ("place", 10))
LABELS = np.array(["male", "female", "low_quality", "other"])
VERDICTS = np.array(["male", "female", "filtered"])
# (recall, filter rate, accuracy) per simulated detector, loosely after the paper's table 3.
DETECTOR_PROFILES = [
    (1.00, 0.00, 0.955),
    (0.19, 0.98, 0.982),
    (0.66, 0.45, 0.783),
    (0.64, 0.38, 0.966),
    (0.98, 0.71, 0.916),
    (0.99, 0.15, 0.940),
    (0.98, 0.72, 0.958),
    (0.98, 0.83, 0.971),
]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# --- simulated data ---------------------------------------------------------------------------


def simulate(n_images: int, n_detectors: int, seed: int) -> dict[str, np.ndarray]:
    """Per image: model index, prompt index, final label, second annotator's label, verdicts."""
    rng = np.random.default_rng(seed)
    n_prompts = sum(n for _, n in CATEGORIES)
    cell = np.arange(n_images) % (len(MODELS) * n_prompts)
    model, prompt = cell // n_prompts, cell % n_prompts
    male_share = rng.beta(2.0, 0.8, size=(len(MODELS), n_prompts))[model, prompt]
    u = rng.random(n_images)
    final = np.where(u < 0.12, 2, np.where(u < 0.125, 3, np.where(rng.random(n_images) < male_share, 0, 1)))
    second = np.where(rng.random(n_images) < 0.9, final, rng.integers(0, 4, n_images))
    verdicts = np.empty((n_detectors, n_images), dtype=np.int64)
    clear = final < 2
    for d in range(n_detectors):
        recall, filter_rate, accuracy = DETECTOR_PROFILES[d % len(DETECTOR_PROFILES)]
        kept = np.where(clear, rng.random(n_images) < recall, rng.random(n_images) >= filter_rate)
        right = rng.random(n_images) < accuracy
        guess = np.where(
            clear, np.where(right, final, 1 - np.minimum(final, 1)), rng.integers(0, 2, n_images)
        )
        verdicts[d] = np.where(kept, guess, 2)
    return {"model": model, "prompt": prompt, "final": final, "second": second, "verdicts": verdicts}


def bias_report(*, study: Study, bootstrap: int) -> dict[str, Any]:
    """The report ``manage.py bias_report --study <slug>`` prints."""
    return analysis_for(study.protocol).build(Scope(study), bootstrap=bootstrap)


def make_study(slug: str) -> tuple[Study, Question, list[Prompt], list[Any]]:
    study = Study.objects.create(name=f"Bench {slug}", slug=slug, protocol="gender")
    spec = protocol_spec("gender").questions[0]
    question = Question.objects.create(study=study, key=spec.key, **spec.as_fields(0))
    prompts = [
        Prompt(
            study=study,
            category=category,
            word=f"{category}-{i}",
            text=f"a photo of one real person, {category} {i}",
        )
        for category, n in CATEGORIES
        for i in range(n)
    ]
    Prompt.objects.bulk_create(prompts)
    prompts = list(Prompt.objects.filter(study=study).order_by("pk"))
    user_model = get_user_model()
    annotators = [user_model.objects.get_or_create(username=f"bench-{slug}-{i}")[0] for i in range(2)]
    return study, question, prompts, annotators


def _output(verdict: int) -> dict[str, Any]:
    label = VERDICTS[verdict]
    return {"label": str(label), "reason": "no_face" if verdict == 2 else "", "scores": {}}


# --- writing rows -----------------------------------------------------------------------------


def write_with_bulk_create(slug: str, data: dict[str, np.ndarray]) -> Study:
    """The small case: every row through the ORM's bulk_create."""
    study, question, prompts, annotators = make_study(slug)
    n = len(data["final"])
    Image.objects.bulk_create(
        [
            Image(
                sha256=f"{slug}-{i:058d}", file=f"images/{slug}/{i}.png", width=512, height=512, format="PNG"
            )
            for i in range(n)
        ],
        batch_size=2000,
    )
    files = list(Image.objects.filter(sha256__startswith=f"{slug}-").order_by("pk"))
    Item.objects.bulk_create(
        [
            Item(
                study=study,
                key=f"{slug}/{i:07d}.png",
                prompt=prompts[data["prompt"][i]],
                t2i_model=MODELS[data["model"][i]],
                index=i,
                completed_seats=2,
            )
            for i in range(n)
        ],
        batch_size=2000,
    )
    items = list(Item.objects.filter(study=study).order_by("pk"))
    ItemImage.objects.bulk_create(
        [
            ItemImage(item=item, image=file, role=ImageRole.IMAGE, source_path=item.key)
            for item, file in zip(items, files, strict=True)
        ],
        batch_size=2000,
    )
    FinalLabel.objects.bulk_create(
        [
            FinalLabel(
                item=item,
                question=question,
                value=LABELS[data["final"][i]],
                source=FinalLabelSource.IMPORTED,
                decided_at=NOW,
            )
            for i, item in enumerate(items)
        ],
        batch_size=2000,
    )
    Label.objects.bulk_create(
        [
            Label(item=item, question=question, annotator=annotators[k], value=LABELS[data[key][i]])
            for i, item in enumerate(items)
            for k, key in enumerate(("final", "second"))
        ],
        batch_size=2000,
    )
    for d, verdicts in enumerate(data["verdicts"]):
        Prediction.objects.bulk_create(
            [
                Prediction(
                    image=file,
                    detector=f"detector-{d}",
                    version="1",
                    kind=KIND_GENDER,
                    output=_output(verdicts[i]),
                )
                for i, file in enumerate(files)
            ],
            batch_size=2000,
        )
    return study


def fast_insert(model: type, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Insert many rows: COPY on PostgreSQL, executemany on SQLite (both skip the ORM).

    Columns the caller does not give get the model field's default (or NULL), so the bench keeps
    working when other engineers add fields with defaults to the models.
    """
    given = set(columns)
    extra = [
        f
        for f in model._meta.concrete_fields
        if not f.primary_key and f.column not in given and f.attname not in given
    ]
    fill = tuple(
        NOW if getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False)
        else f.get_db_prep_save(f.get_default(), connection) if f.has_default() or not f.null
        else None
        for f in extra
    )  # fmt: skip
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    names = ", ".join(quote(c) for c in [*columns, *(f.column for f in extra)])  # "index" is reserved
    full = (tuple(row) + fill for row in rows)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            raw = cursor.cursor
            with raw.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in full:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * (len(columns) + len(extra)))
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(full))


def write_fast(slug: str, data: dict[str, np.ndarray]) -> Study:
    """The big case: raw COPY / executemany (see the module docstring)."""
    study, question, prompts, annotators = make_study(slug)
    prompt_ids = [p.pk for p in prompts]
    n = len(data["final"])
    fast_insert(
        Image,
        ("sha256", "file", "width", "height", "format", "created_at"),
        ((f"{slug}-{i:058d}", f"images/{slug}/{i}.png", 512, 512, "PNG", NOW) for i in range(n)),
    )
    file_ids = list(
        Image.objects.filter(sha256__startswith=f"{slug}-").order_by("pk").values_list("pk", flat=True)
    )
    fast_insert(
        Item,
        ("study_id", "key", "prompt_id", "t2i_model", "index", "params", "metadata", "question_keys", "completed_seats", "created_at"),
        (
            (study.pk, f"{slug}/{i:07d}.png", prompt_ids[data["prompt"][i]], MODELS[data["model"][i]], i, "{}", "{}", "[]", 2, NOW)
            for i in range(n)
        ),
    )  # fmt: skip
    item_ids = list(Item.objects.filter(study=study).order_by("pk").values_list("pk", flat=True))
    fast_insert(
        ItemImage,
        ("item_id", "image_id", "role", "source_path"),
        ((item, file, ImageRole.IMAGE.value, f"{slug}/{i:07d}.png") for i, (item, file) in enumerate(zip(item_ids, file_ids, strict=True))),
    )  # fmt: skip
    labels = LABELS.tolist()
    fast_insert(
        FinalLabel,
        ("item_id", "question_id", "value", "source", "note", "decided_at"),
        (
            (pk, question.pk, labels[data["final"][i]], FinalLabelSource.IMPORTED.value, "", NOW)
            for i, pk in enumerate(item_ids)
        ),
    )
    fast_insert(
        Label,
        (
            "item_id",
            "question_id",
            "annotator_id",
            "value",
            "reason",
            "request_id",
            "created_at",
            "updated_at",
        ),
        (
            (pk, question.pk, annotators[k].pk, labels[data[key][i]], "", "", NOW, NOW)
            for i, pk in enumerate(item_ids)
            for k, key in enumerate(("final", "second"))
        ),
    )
    outputs = [json.dumps(_output(v)) for v in range(len(VERDICTS))]
    for d, row in enumerate(data["verdicts"].tolist()):
        fast_insert(
            Prediction,
            ("image_id", "detector", "version", "kind", "status", "output", "error", "created_at"),
            (
                (pk, f"detector-{d}", "1", KIND_GENDER, "ok", outputs[v], "", NOW)
                for pk, v in zip(file_ids, row, strict=True)
            ),
        )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return study


# --- timing -----------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall seconds, this process's CPU seconds (the database server's CPU is not in it), result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def bench_case(name: str, study: Study, *, repeat: int, bootstrap: int) -> None:
    n_predictions = Prediction.objects.filter(image__item_images__item__study=study).count()
    n_images = Item.objects.filter(study=study).count()
    bias_report(study=study, bootstrap=0)  # warm caches and connections
    full = [timed_cpu(lambda: bias_report(study=study, bootstrap=bootstrap)) for _ in range(repeat)]
    sql_only = [timed(lambda: bias_report(study=study, bootstrap=0))[0] for _ in range(repeat)]
    seconds = [t for t, _, _ in full]
    cpu = [c for _, c, _ in full]
    report = full[-1][2]
    print(
        f"{name}: {n_images:,} images, {n_predictions:,} predictions, {len(report['detectors'])} detectors: "
        f"bias_report (bootstrap={bootstrap}) median {statistics.median(seconds):.2f} s wall "
        f"(min {min(seconds):.2f}, max {max(seconds):.2f}; Python CPU median {statistics.median(cpu):.2f} s); "
        f"without bootstrap median {statistics.median(sql_only):.2f} s wall  [{_load()}]"
    )
    for model, human in report["human"].items():
        print(f"    human {model}: model bias score {human['model_bias_score']:.3f} ci95 {human['ci95']}")
    first = next(iter(report["detectors"].values()), None)
    if first:
        print(f"    first detector filtering: {first['filtering']}")


# Pages a researcher waits for, then the downloads behind their links (name, path).
PAGES = (
    ("overview page", "/reports/"),
    ("heatmap page", "/reports/heatmap/"),
    ("model_bias chart svg", "/reports/charts/model_bias.svg"),
    ("heatmap chart svg", "/reports/charts/heatmap.svg"),
    ("histogram chart svg", "/reports/charts/histogram.svg"),
    ("model_bias table csv", "/reports/tables/model_bias.csv"),
    ("model_bias table tex", "/reports/tables/model_bias.tex"),
    ("prompt_scores table csv", "/reports/tables/prompt_scores.csv"),
)


def researcher_client() -> Client:
    user = get_user_model().objects.get_or_create(username="bench-researcher")[0]
    user.groups.add(Group.objects.get_or_create(name=permissions.RESEARCHER)[0])
    client = Client()
    client.force_login(user)
    return client


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def bench_pages(name: str, study: Study, *, repeat: int) -> None:
    """Each page as a logged-in researcher's ``Client().get``: cold (report cache cleared before
    the request, i.e. the first visit after a write) and warm (the same request again)."""
    client = researcher_client()
    query = {"study": study.slug}
    for label, path in PAGES:
        cold, warm = [], []
        for _ in range(repeat):
            cache.clear()
            seconds, response = timed(lambda path=path: client.get(path, query))
            assert response.status_code == 200, (path, response.status_code)
            cold.append(seconds)
            warm.append(timed(lambda path=path: client.get(path, query))[0])
        print(
            f"    {name} {label:<24} cold median {statistics.median(cold):.3f} s "
            f"(max {max(cold):.3f}), warm median {statistics.median(warm):.3f} s  [{_load()}]"
        )


def bench_visit(name: str, study: Study, *, repeat: int) -> None:
    """What a researcher waits for on the first visit after a write (cache cleared): the overview,
    then the chart its <img> fetches (the report is cached by then), then the heatmap page (the
    report without intervals is taken from the overview's) and its histogram <img>."""
    client = researcher_client()
    query = {"study": study.slug}
    steps = (
        ("overview", "/reports/"),
        ("+ its chart <img>", "/reports/charts/view/model_bias.svg"),
        ("heatmap after overview", "/reports/heatmap/"),
        ("+ its histogram <img>", "/reports/charts/view/histogram.svg"),
    )
    times: dict[str, list[float]] = {label: [] for label, _ in steps}
    for _ in range(repeat):
        cache.clear()
        for label, path in steps:
            seconds, response = timed(lambda path=path: client.get(path, query))
            assert response.status_code == 200, (path, response.status_code)
            times[label].append(seconds)
    summary = ", ".join(f"{label} {statistics.median(t):.3f} s" for label, t in times.items())
    print(f"    {name} first visit after a write (medians): {summary}  [{_load()}]")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=6000)
    parser.add_argument("--big-images", type=int, default=125_000)
    parser.add_argument("--detectors", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--no-pages", action="store_true", help="time bias_report only, not the pages")
    args = parser.parse_args(argv)

    setup_test_environment()
    settings_dict = connection.settings_dict
    tmp = None
    if connection.vendor == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="bench-report-")
        settings_dict.setdefault("TEST", {})["NAME"] = str(Path(tmp.name) / "bench.sqlite3")
    old_name = settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    print(f"database: {connection.vendor} ({connection.settings_dict['NAME']})")
    try:
        if args.images:
            data = simulate(args.images, args.detectors, seed=1)
            seconds, study = timed(lambda: _atomic(lambda: write_with_bulk_create("small", data)))
            print(f"small case written with bulk_create in {seconds:.1f} s")
            bench_case("small", study, repeat=args.repeat, bootstrap=args.bootstrap)
            if not args.no_pages:
                bench_pages("small", study, repeat=args.repeat)
                bench_visit("small", study, repeat=args.repeat)
        if args.big_images:
            data = simulate(args.big_images, args.detectors, seed=2)
            seconds, study = timed(lambda: _atomic(lambda: write_fast("big", data)))
            how = "COPY" if connection.vendor == "postgresql" else "executemany"
            print(f"big case written with {how} in {seconds:.1f} s")
            bench_case("big", study, repeat=args.repeat, bootstrap=args.bootstrap)
            if not args.no_pages:
                bench_pages("big", study, repeat=args.repeat)
                bench_visit("big", study, repeat=args.repeat)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
        if tmp is not None:
            tmp.cleanup()


def _atomic(fn: Callable[[], Study]) -> Study:
    with transaction.atomic():
        return fn()


if __name__ == "__main__":
    main()
