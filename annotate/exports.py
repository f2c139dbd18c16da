"""A study's ground truth as a file, one row per (item, question) (columns: docs/reference)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import IO, Any

from django.db.models import Count, F
from django.http import HttpResponse

from annotate.models import FinalLabel, Label
from studies.batching import IsIn, in_chunk_size
from studies.csvio import safe_dict_writer
from studies.models import ImageRole, Item, ItemImage, Study
from studies.protocols import protocol_spec
from studies.selectors import item_questions, study_questions

EXPORT_FORMATS = ("csv", "json")
HEAD_COLUMNS = ("item", "question", "image")
PAIR_COLUMNS = ("input_image", "output_image")
ITEM_COLUMNS = ("t2i_model", "category", "word", "prompt", "seed")
TAIL_COLUMNS = ("final_label", "resolved_by", "note", "posterior")


def ground_truth_columns(n_annotators: int, *, pairs: bool = False) -> list[str]:
    """Export columns for a study with at most ``n_annotators`` labels per (item, question)."""
    middle = [f"{kind}_{i}" for i in range(1, n_annotators + 1) for kind in ("annotator", "label", "reason")]
    return [*HEAD_COLUMNS, *(PAIR_COLUMNS if pairs else ()), *ITEM_COLUMNS, *middle, *TAIL_COLUMNS]


def _annotator_columns(study: Study) -> int:
    """How many annotator columns the export has: N, or the most labels of any (item, question)."""
    most = (
        Label.objects.filter(item__study=study)
        .order_by()
        .values("item_id", "question_id")
        .annotate(n=Count("id"))
        .order_by("-n")
        .values_list("n", flat=True)
        .first()
    )
    return max(study.labels_per_item, most or 0)


def ground_truth_rows_stream(
    *, study: Study, n_annotators: int | None = None, chunk: int | None = None
) -> Iterator[dict[str, Any]]:
    """``ground_truth_rows`` read a chunk of items at a time, in constant memory."""
    n = n_annotators if n_annotators is not None else _annotator_columns(study)
    size = chunk or in_chunk_size()
    questions = study_questions(study)
    pairs = protocol_spec(study.protocol).paired
    after = 0
    while True:
        items = list(
            Item.objects.filter(study=study, pk__gt=after).select_related("prompt").order_by("id")[:size]
        )
        if not items:
            return
        after = items[-1].pk
        ids = [item.pk for item in items]
        # By annotator id within an item: label_1 / label_2 are the pairs kappa is computed on.
        labels: dict[tuple[int, int], list[tuple[str, ...]]] = {}
        for item_id, question_id, *label in (
            Label.objects.filter(IsIn(F("item_id"), ids), item__study=study)
            .order_by("item_id", "question_id", "annotator_id")
            .values_list("item_id", "question_id", "annotator__username", "value", "reason")
        ):
            labels.setdefault((item_id, question_id), []).append(tuple(label))
        finals = {
            (f.item_id, f.question_id): f
            for f in FinalLabel.objects.filter(IsIn(F("item_id"), ids)).select_related("decided_by")
        }
        links: dict[int, dict[str, str]] = {}
        for item_id, role, path in ItemImage.objects.filter(IsIn(F("item_id"), ids)).values_list(
            "item_id", "role", "source_path"
        ):
            links.setdefault(item_id, {})[role] = path
        for item in items:
            paths = links.get(item.pk, {})
            first = (
                paths.get(ImageRole.IMAGE) or paths.get(ImageRole.INPUT) or paths.get(ImageRole.OUTPUT, "")
            )
            prompt = item.prompt
            described = {
                "t2i_model": item.t2i_model,
                "category": prompt.category if prompt else "",
                "word": prompt.word if prompt else "",
                "prompt": prompt.text if prompt else "",
                "seed": item.seed,
            }
            for question in item_questions(item, questions):
                row: dict[str, Any] = {"item": item.key, "question": question.key, "image": first}
                if pairs:
                    row["input_image"] = paths.get(ImageRole.INPUT, "")
                    row["output_image"] = paths.get(ImageRole.OUTPUT, "")
                row.update(described)
                given = labels.get((item.pk, question.pk), [])
                for i in range(1, n + 1):
                    cells = given[i - 1] if i <= len(given) else ("", "", "")
                    row.update(zip((f"annotator_{i}", f"label_{i}", f"reason_{i}"), cells, strict=True))
                final = finals.get((item.pk, question.pk))
                row["final_label"] = final.value if final else ""
                row["resolved_by"] = final.decided_by.get_username() if final and final.decided_by else ""
                row["note"] = final.note if final else ""
                row["posterior"] = final.posterior if final else None
                yield row


def ground_truth_rows(*, study: Study) -> list[dict[str, Any]]:
    """The export's rows by item then question, in memory."""
    return list(ground_truth_rows_stream(study=study))


def ground_truth_export(*, study: Study, fmt: str) -> str:
    """The study's ground truth as CSV text or a JSON document; ValueError for an unknown format."""
    buffer = io.StringIO()
    ground_truth_write(study=study, fmt=fmt, out=buffer)
    return buffer.getvalue()


def ground_truth_download(study: Study, fmt: str, content_type: str) -> HttpResponse:
    """The study's ground truth as a file download."""
    response = HttpResponse(ground_truth_export(study=study, fmt=fmt), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-ground-truth.{fmt}"'
    return response


def ground_truth_write(
    *, study: Study, fmt: str, out: IO[str], progress: Callable[[int], None] | None = None
) -> int:
    """Write ``ground_truth_export`` to ``out`` a chunk of items at a time; the number of rows."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    n = _annotator_columns(study)
    columns = ground_truth_columns(n, pairs=protocol_spec(study.protocol).paired)
    rows = _reporting(ground_truth_rows_stream(study=study, n_annotators=n), progress)
    count = 0
    if fmt == "csv":
        writer = safe_dict_writer(out, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
            count += 1
        return count
    questions = study_questions(study)
    head = {
        "study": study.slug,
        "protocol": study.protocol,
        "labels": questions[0].values if questions else [],
        "questions": [{"key": q.key, "text": q.text, "values": q.values} for q in questions],
        "columns": columns,
    }
    # The text json.dumps(document, indent=2) gives, written a row at a time.
    text = json.dumps(head, ensure_ascii=False, indent=2)
    out.write(text[: -len("\n}")] + ',\n  "rows": [')
    for count, row in enumerate(rows, 1):
        body = json.dumps(row, ensure_ascii=False, indent=2).replace("\n", "\n    ")
        out.write(("\n    " if count == 1 else ",\n    ") + body)
    out.write("\n  ]\n}\n" if count else "]\n}\n")
    return count


def _reporting(
    rows: Iterator[dict[str, Any]], progress: Callable[[int], None] | None
) -> Iterator[dict[str, Any]]:
    """``rows`` as they are, with ``progress(n)`` after every 1,000 written and for the rest at the end."""
    count = 0
    for count, row in enumerate(rows, 1):
        yield row
        if progress and count % 1000 == 0:
            progress(1000)
    if progress and count % 1000:
        progress(count % 1000)
