"""Predictions made elsewhere, from a CSV file, on the import pipeline (``studies.imports``): every
row checked (its image, its output against its kind's schema and its study's questions, what is
stored already), then all rows written in one transaction, or none."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from django.db import connection
from django.utils import timezone

from detectors.kinds import (
    FILTER_REASON_LABELS,
    KIND_GENDER,
    KIND_OBJECTS,
    KINDS,
    STUDY_CHECKS,
    OutputInvalid,
    objects_inside_image,
    output_fits_questions,
    output_validate,
    validate_gender,
)
from detectors.models import Prediction, PredictionStatus
from detectors.services import detector_name_check
from studies.batching import chunk_rows, in_chunks, in_rows, is_in, rows_insert
from studies.errors import ImportRejected
from studies.imports import Importer, ImportSummary, RejectedRow, csv_rows_stream, import_run
from studies.jsonbounds import JSONOutOfBounds, json_loads_bounded
from studies.models import Image, ItemImage, Question, Study
from studies.models import Item as StudyItem

IMPORT_REQUIRED = ("image", "detector")


class PredictionImportRejected(Exception):
    """Nothing was imported; ``errors`` lists every problem, row by row (line numbers of the file)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


@dataclass(frozen=True)
class PredictionImportSummary:
    """What an import stored (or, in a dry run, would store), and the rows it left alone: the
    same result stored already for the same image, detector and version."""

    created: int
    by_detector: dict[str, int]
    unchanged: int = 0


@dataclass(frozen=True)
class _Candidate:
    """An image file a path of the import names, in one study."""

    image_id: int
    study_slug: str


def _image_index(paths: set[str]) -> dict[str, set[_Candidate]]:
    """path → the image files it names: item images imported under that source path, else the
    images of the items with that key (a pair's key names both its files)."""
    index: dict[str, set[_Candidate]] = {}
    # A path with a NUL character names no image (and PostgreSQL refuses it in a query).
    paths = {path for path in paths if "\x00" not in path}
    found: list[tuple[int, str, str]] = []
    with connection.cursor() as cursor:
        for chunk in in_chunks(sorted(paths)):
            cursor.execute(*_image_index_query(chunk))
            found += cursor.fetchall()
    for image_id, slug, path in found:
        index.setdefault(path, set()).add(_Candidate(image_id, slug))
    # One-image items have their path as key, so this second look-up is for the rest only.
    rest = sorted(paths - set(index))
    for image_id, slug, key in in_rows(
        ItemImage.objects, "item__key", rest, "image_id", "item__study__slug", "item__key"
    ):
        index.setdefault(key, set()).add(_Candidate(image_id, slug))
    return index


def _image_index_query(paths: list[str]) -> tuple[str, list[Any]]:
    """The statement finding the item images imported under ``paths`` → (image id, study slug, path)."""
    tables = {
        "ii": ItemImage._meta.db_table,
        "i": StudyItem._meta.db_table,
        "s": Study._meta.db_table,
    }
    joins = "JOIN {i} i ON i.id = ii.item_id JOIN {s} s ON s.id = i.study_id".format(**tables)
    if connection.vendor == "postgresql":
        return (
            "SELECT ii.image_id, s.slug, ii.source_path FROM json_array_elements_text(%s::json) p(path) "
            f"JOIN {tables['ii']} ii ON ii.source_path = p.path {joins}",
            [json.dumps(paths)],
        )
    where, params = is_in("ii.source_path", paths)
    return f"SELECT ii.image_id, s.slug, ii.source_path FROM {tables['ii']} ii {joins} WHERE {where}", params


_NO_CANDIDATES: frozenset[_Candidate] = frozenset()


def _row_image(path: str, candidates: AbstractSet[_Candidate], slug: str) -> int:
    """The one image file ``path`` names (in study ``slug`` if given); raises ValueError."""
    if len(candidates) == 1:  # the usual case, without the sets below
        (only,) = candidates
        if not slug or only.study_slug == slug:
            return only.image_id
    if slug:
        candidates = {c for c in candidates if c.study_slug == slug}
        if not candidates:
            raise ValueError(f"no image {path!r} in study {slug!r}")
    elif not candidates:
        raise ValueError(f"no image {path!r} has been imported")
    files = {c.image_id for c in candidates}
    if len(files) > 1:
        slugs = sorted({c.study_slug for c in candidates})
        if len(slugs) > 1 and not slug:
            raise ValueError(f"image {path!r} is in several studies ({', '.join(slugs)}); give --study")
        raise ValueError(
            f"{path!r} names {len(files)} image files in study {slugs[0]} (an item with several "
            "images): give the path of the image itself"
        )
    return files.pop()


def _json_cell(text: str, column: str) -> Any:
    """The JSON value of a cell; ValueError naming the column."""
    try:
        return json_loads_bounded(text, field=column)
    except JSONOutOfBounds as exc:
        if exc.problem.startswith("is not valid JSON"):
            raise ValueError(f"{column} is not JSON: {text[:80]!r}") from None
        raise ValueError(str(exc)) from None


def _parse_scores(row: dict[str, str]) -> dict[str, Any]:
    scores: dict[str, Any] = {}
    if row.get("scores"):
        parsed = _json_cell(row["scores"], "scores")
        if not isinstance(parsed, dict):
            raise ValueError('scores must be a JSON object, e.g. {"male": 0.9}')
        scores.update(parsed)
    if row.get("score"):
        scores["score"] = _number_cell(row["score"], "score", "finite")
    return scores


def _number_cell(text: str, column: str, wanted: str) -> float:
    """The number in a cell, finite (and ≥ 0 unless ``wanted`` is "finite"); ValueError naming the column."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} is not a number: {text!r}") from None
    if not math.isfinite(value) or (value < 0 and wanted != "finite"):
        raise ValueError(f"{column} must be {wanted}, got {text!r}")
    return value


def _parse_output(row: dict[str, str], kind: str) -> dict[str, Any] | None:
    """The row's ``output`` column checked against ``kind``, or None when it is empty."""
    text = row.get("output", "")
    if not text:
        return None
    try:
        return output_validate(kind, _json_cell(text, "output"))
    except OutputInvalid as exc:
        where = "output" if exc.field == "output" else f"output.{exc.field}"
        raise ValueError(f"{where}: {exc.problem} ({kind} output)") from None


_REASONS = {value: value for value in FILTER_REASON_LABELS} | {
    label.lower(): value for value, label in FILTER_REASON_LABELS.items()
}


def _gender_columns(row: dict[str, str]) -> dict[str, Any]:
    """The gender output the prediction, reason, score(s) and detail columns describe (unknown
    reasons filed under "other", their text as detail); ValueError names the column."""
    prediction = row.get("prediction", "").lower()
    reason, detail = row.get("reason", ""), row.get("detail", "")
    if prediction not in ("male", "female", "filtered"):
        raise ValueError(f"prediction must be male, female or filtered, got {row.get('prediction', '')!r}")
    if prediction != "filtered" and reason:
        raise ValueError(f"a reason is only allowed with filtered, got {reason!r} for {prediction}")
    known = _REASONS.get(reason.lower()) if prediction == "filtered" else ""
    if known is None:
        known, detail = "other", detail or reason
    output = {"label": prediction, "reason": known, "scores": _parse_scores(row), "detail": detail}
    try:
        return validate_gender(output)
    except OutputInvalid as exc:
        raise ValueError(str(exc)) from None


def _columns_agree(row: dict[str, str], kind: str, output: dict[str, Any]) -> None:
    """With an ``output``, the verdict columns must be empty or say the same (as an exported
    file does); raises ValueError naming the first column that disagrees."""
    scores_given = bool(row.get("score")) or row.get("scores", "") not in ("", "{}")
    if kind != KIND_GENDER:
        for column in ("prediction", "reason", "detail", "score"):
            if row.get(column):
                raise ValueError(f"{column} is for gender rows; a {kind} row has only its output")
        if scores_given and _parse_scores(row) != output.get("scores", {}):
            raise ValueError("scores disagrees with output.scores")
        return
    if not (row.get("prediction") or row.get("reason") or row.get("detail") or scores_given):
        return
    columns = _gender_columns({**row, "prediction": row.get("prediction") or output["label"]})
    for key, column in (("label", "prediction"), ("reason", "reason"), ("detail", "detail")):
        if row.get(column) and columns.get(key, "") != output.get(key, ""):
            raise ValueError(f"{column} {row[column]!r} disagrees with output.{key} {output.get(key, '')!r}")
    if scores_given and columns["scores"] != output["scores"]:
        raise ValueError("scores disagrees with output.scores")


def _parse_result(row: dict[str, str]) -> tuple[str, str, dict[str, Any], str]:
    """→ (status, kind, output, error) of one row; raises ValueError naming the column."""
    status = row.get("status", "").lower() or PredictionStatus.OK
    kind = row.get("kind", "").lower() or KIND_GENDER
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {row['kind']!r}")
    if status == PredictionStatus.FAILED:
        if row.get("prediction"):
            raise ValueError("a failed row has no prediction")
        if row.get("output", "") not in ("", "{}"):
            raise ValueError("a failed row has no output")
        return status, kind, {}, row.get("error", "") or "failed (imported)"
    if status != PredictionStatus.OK:
        raise ValueError(f"status must be ok or failed, got {row['status']!r}")
    output = _parse_output(row, kind)
    if output is not None:
        _columns_agree(row, kind, output)
        return status, kind, output, ""
    if kind != KIND_GENDER:
        raise ValueError(f"output is empty: a {kind} row needs its output as a JSON object")
    return status, kind, _gender_columns(row), ""


class _Staged(NamedTuple):
    """A checked row, kept between the checking pass and the writing pass. A plain tuple: a
    Prediction model instance per row costs more than the row's checks."""

    image_id: int
    detector: str
    version: str
    kind: str
    status: str
    output: dict[str, Any]
    error: str
    seconds: float | None


# The columns of a staged row, then created_at.
_STAGED_COLUMNS = (*_Staged._fields, "created_at")


class _Parsed(NamedTuple):
    """A row whose own columns are checked; its image is looked up with its batch's."""

    line: int
    row: dict[str, str]
    path: str
    detector: str
    version: str
    slug: str


class _PredictionsImporter(Importer[_Parsed, _Staged]):
    kind = "predictions"
    writes_in_dry_run = False

    def __init__(self, csv_path: Path | str, study: Study | None, version: str) -> None:
        self.csv_path, self.study, self.version = csv_path, study, version
        # (detector, version) → image id → line: the file's own duplicates (docs/explanation/imports.md).
        self.seen: dict[tuple[str, str], dict[int, int]] = {}
        self.by_detector: dict[str, int] = {}
        self.unchanged = 0

    def rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        header, rows = csv_rows_stream(self.csv_path, required=IMPORT_REQUIRED)
        if "output" not in header and "prediction" not in header:
            rows.close()  # the file
            raise ImportRejected(
                f"{Path(self.csv_path).name}: missing required column prediction (or output); "
                f"found: {', '.join(header)}"
            )
        return rows

    def parse_row(self, number: int, row: dict[str, str]) -> _Parsed | RejectedRow:
        path, detector = row.get("image", ""), row.get("detector", "")
        try:
            if "\x00" in "".join(row.values()):
                # PostgreSQL stores no NUL character in text: the whole write would fail, unnamed.
                nul = next(column for column, value in row.items() if "\x00" in value)
                raise ValueError(f"column '{nul}' contains a NUL character")
            if not path:
                raise ValueError("image is empty")
            detector_name_check(detector)
            row_version = row.get("version", "") or self.version
            if len(row_version) > 200:
                raise ValueError("version is longer than 200 characters")
        except ValueError as exc:
            return RejectedRow(number, path, str(exc))
        slug = row.get("study", "") or (self.study.slug if self.study else "")
        return _Parsed(number, row, path, detector, row_version, slug)

    def check_batch(self, parsed: list[_Parsed], summary: ImportSummary) -> list[_Staged]:
        """The rows of a batch to write; those refused go to ``summary.rejected``, those stored
        already with the same result are counted (``unchanged``)."""
        index = _image_index({p.path for p in parsed})
        rejected = summary.rejected
        good: list[_Staged] = []
        lines: dict[tuple[int, str, str], int] = {}
        slugs: dict[tuple[int, str, str], str] = {}  # the study a row names, for the study checks
        # The batch's results by the row's result columns: a batch repeats a few verdicts
        # thousands of times when the file has no scores (the outputs are shared, never changed).
        verdicts: dict[tuple[str | None, ...], tuple[str, str, dict[str, Any], str]] = {}
        checked_kinds = set(STUDY_CHECKS)  # read from the registry once a batch, not once a row
        for line, row, path, detector, version, slug in parsed:
            try:
                image_id = _row_image(path, index.get(path, _NO_CANDIDATES), slug)
                key = tuple(map(row.get, _RESULT_COLUMNS))
                found = verdicts.get(key)
                if found is None:  # a refused verdict is not remembered: it raises again
                    found = verdicts[key] = _parse_result(row)
                status, kind, output, error = found
                seconds = (
                    _number_cell(row["seconds"], "seconds", "a non-negative number")
                    if row.get("seconds")
                    else None
                )
            except ValueError as exc:
                rejected.append(RejectedRow(line, path, str(exc)))
                continue
            of_pair = self.seen.setdefault((detector, version), {})
            if image_id in of_pair:
                message = f"duplicate of line {of_pair[image_id]} (same image, detector, version)"
                rejected.append(RejectedRow(line, path, message))
                continue
            of_pair[image_id] = line
            lines[(image_id, detector, version)] = line
            if kind in checked_kinds:  # only these read the study again
                slugs[(image_id, detector, version)] = slug
            # Positional, in _Staged's field order: a million rows are made here.
            good.append(_Staged(image_id, detector, version, kind, status, output, error, seconds))
        stored, same = _already_stored(good, lines)
        if same:
            self.unchanged += len(same)
            good = [p for p in good if (p.image_id, p.detector, p.version) not in same]
        found_bad = stored + _boxes_outside(good, lines) + _outputs_unfit(good, lines, slugs)
        if found_bad:
            rejected.extend(found_bad)
            refused = {r.row for r in found_bad}
            good = [p for p in good if lines[(p.image_id, p.detector, p.version)] not in refused]
        if not rejected:
            for p in good:
                self.by_detector[p.detector] = self.by_detector.get(p.detector, 0) + 1
        return good

    def check_end(self, summary: ImportSummary) -> None:
        if not summary.rows:
            raise PredictionImportRejected([f"{self.csv_path}: no data rows"])

    def write_begin(self) -> None:
        self.now = timezone.now()

    def write_batch(self, good: list[_Staged], summary: ImportSummary) -> None:
        # Plain multi-row INSERTs of the staged tuples (no model instance per row).
        rows_insert(Prediction, _STAGED_COLUMNS, [(*row, self.now) for row in good])


def predictions_import(
    *,
    csv_path: Path | str,
    study: Study | None = None,
    version: str = "imported",
    dry_run: bool = False,
    progress: Callable[[str, int], None] | None = None,
    user: Any = None,
) -> PredictionImportSummary:
    """Load predictions made elsewhere, all rows or none (columns: docs/reference/contracts.md; an
    ``export_predictions --format csv`` file reads back unchanged). Raises PredictionImportRejected listing
    every bad row."""
    importer = _PredictionsImporter(csv_path, study, version)
    try:
        summary = import_run(
            importer,
            summary=ImportSummary(dry_run=dry_run),
            source=csv_path,
            study=study,
            user=user,
            progress=progress,
        )
    except ImportRejected as exc:  # the file itself: missing, not UTF-8 text, no such column
        raise PredictionImportRejected([str(exc)]) from None
    if summary.rejected:
        raise PredictionImportRejected([f"line {r.row}: {r.reason}" for r in summary.rejected])
    by_detector = importer.by_detector
    return PredictionImportSummary(
        created=sum(by_detector.values()), by_detector=by_detector, unchanged=importer.unchanged
    )


# The columns ``_parse_result`` reads: two rows equal in them have the same result.
_RESULT_COLUMNS = ("status", "kind", "prediction", "reason", "detail", "score", "scores", "output", "error")


def _boxes_outside(predictions: list[_Staged], lines: dict[tuple[int, str, str], int]) -> list[RejectedRow]:
    """Rows whose objects output has a box outside its image (the sizes in one query)."""
    objects = [p for p in predictions if p.kind == KIND_OBJECTS and p.output]
    ids = (p.image_id for p in objects)
    sizes = {pk: (w, h) for pk, w, h in in_rows(Image.objects, "pk", ids, "pk", "width", "height")}
    errors = []
    for p in objects:
        try:
            objects_inside_image(p.output, *sizes[p.image_id])
        except OutputInvalid as exc:
            errors.append(RejectedRow(lines[(p.image_id, p.detector, p.version)], "", f"output.{exc}"))
    return errors


def _outputs_unfit(
    predictions: list[_Staged],
    lines: dict[tuple[int, str, str], int],
    slugs: dict[tuple[int, str, str], str],
) -> list[RejectedRow]:
    """Rows whose output names a question or answer its study lacks (kinds in ``STUDY_CHECKS``): checked
    against the study the row names, else against the studies of its image (it must fit one)."""
    checked = [p for p in predictions if p.kind in STUDY_CHECKS and p.output]
    if not checked:
        return []
    of_image: dict[int, set[int]] = {}
    ids = sorted({p.image_id for p in checked})
    for image_id, study_id in in_rows(ItemImage.objects, "image_id", ids, "image_id", "item__study_id"):
        of_image.setdefault(image_id, set()).add(study_id)
    by_slug = dict(Study.objects.filter(slug__in=set(slugs.values()) - {""}).values_list("slug", "pk"))
    questions: dict[int, dict[str, list[str]]] = {}
    for study_id, question_key, choices in Question.objects.filter(
        study_id__in={s for ids in of_image.values() for s in ids}
    ).values_list("study_id", "key", "choices"):
        questions.setdefault(study_id, {})[question_key] = [str(c["value"]) for c in choices]
    errors = []
    for p in checked:
        key = (p.image_id, p.detector, p.version)
        named = by_slug.get(slugs.get(key, ""))
        studies = sorted({named} if named is not None else of_image.get(p.image_id, set()))
        problems = []
        for study_id in studies:
            try:
                output_fits_questions(p.kind, p.output, questions.get(study_id, {}))
                break
            except OutputInvalid as exc:
                problems.append(exc)
        else:
            if problems:
                errors.append(RejectedRow(lines[key], "", f"output.{problems[0]} ({p.kind} output)"))
    return errors


def _stored_query(where: str) -> str:
    return (
        f"SELECT image_id, kind, status, output, error, seconds FROM {Prediction._meta.db_table} "
        f"WHERE detector = %s AND version = %s AND {where}"
    )


def _already_stored(
    predictions: list[_Staged], lines: dict[tuple[int, str, str], int]
) -> tuple[list[RejectedRow], set[tuple[int, str, str]]]:
    """Rows whose image already has a prediction of their detector and version: the errors of
    those whose result differs from the stored one, and the keys of those with the same result
    (a re-import of the same file: nothing to write)."""
    errors = []
    same: set[tuple[int, str, str]] = set()
    by_pair: dict[tuple[str, str], dict[int, _Staged]] = {}
    for p in predictions:
        by_pair.setdefault((p.detector, p.version), {})[p.image_id] = p
    for (detector, version), staged in by_pair.items():
        # Plain SQL: the ORM prepares every value of a chunk.
        stored = list(chunk_rows(_stored_query, staged, "image_id", detector, version))
        for image_id, kind, status, output, error, seconds in stored:
            p = staged[image_id]
            if isinstance(output, str | bytes):  # SQLite's JSON text (PostgreSQL's driver decodes jsonb)
                output = json.loads(output)
            if (p.kind, p.status, p.output, p.error, p.seconds) == (kind, status, output, error, seconds):
                same.add((image_id, detector, version))
                continue
            message = (
                f"this image already has a {detector}@{version} prediction with another result "
                "(import under another --version)"
            )
            errors.append(RejectedRow(lines[(image_id, detector, version)], "", message))
    return sorted(errors, key=lambda r: r.row), same
