"""Pair-change measurements and the stratified draw of pairs for human checking; which
detector is an attribute's source: docs/tutorials/pair-change.md."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from detectors.kinds import KIND_MEASUREMENTS
from detectors.models import Prediction, PredictionStatus
from metrics import pair_change as pc
from protocols.pair_change.spec import KEY
from reports.selectors import Scope, latest_detector_versions, of_versions
from studies.models import ImageRole, Item, ItemImage, Study

PROTOCOL = KEY  # the studies these functions read and write
PAIR_ROLES = (ImageRole.INPUT.value, ImageRole.OUTPUT.value)
SIDE_NAMES = {ImageRole.INPUT.value: "seed photo", ImageRole.OUTPUT.value: "edited image"}
#: Attribute -> the field of a ``measurements`` output that measures it.
FIELDS: dict[str, str] = {pc.AGE: "age", pc.GENDER: "gender", pc.SKIN: "skin_gray"}
#: ``Study.parameters`` keys this module reads or writes.
SAMPLES_KEY = "samples"
MEASURE_KEY = "measure"
THRESHOLDS_KEY = "thresholds"


class MeasureSourceError(ValueError):
    """The detector measuring an attribute cannot be decided (several candidates and no
    choice, a chosen detector without such measurements, a malformed ``--measure``)."""


class SamplingError(ValueError):
    """A draw cannot be made as asked; the message says what to change."""


def study_thresholds(study: Study) -> pc.Thresholds:
    """The study's age and skin thresholds (``parameters["thresholds"]``), the paper's 25 years
    and 20 gray levels where unset. PairChangeInputError for one that is not a positive number."""
    given = study.parameters.get(THRESHOLDS_KEY) if isinstance(study.parameters, dict) else None
    given = given if isinstance(given, Mapping) else {}
    try:
        return pc.Thresholds(
            age=given.get("age", pc.DEFAULT_AGE_THRESHOLD), skin=given.get("skin", pc.DEFAULT_SKIN_THRESHOLD)
        )
    except pc.PairChangeInputError as error:
        raise pc.PairChangeInputError(f"study '{study.slug}': parameters.thresholds: {error}") from None


_MEASURE_PART = re.compile(r"^\s*(?P<attribute>[a-z_]+)\s*=\s*(?P<detector>\S+)\s*$")


def parse_measure(text: str | Mapping[str, str] | None) -> dict[str, str]:
    """``"age=D1,gender=D1,skin=D2"`` (or a mapping) → ``{"age": "D1", ...}``; MeasureSourceError
    for a malformed, unknown or repeated part."""
    if not text:
        return {}
    if isinstance(text, Mapping):
        items = [(str(k), str(v)) for k, v in text.items()]
    else:
        items = []
        for part in str(text).split(","):
            if not part.strip():
                continue
            match = _MEASURE_PART.match(part)
            if match is None:
                raise MeasureSourceError(
                    f"--measure part {part.strip()!r} is not attribute=detector (e.g. age=face_age_gender)"
                )
            items.append((match["attribute"], match["detector"]))
    chosen: dict[str, str] = {}
    for attribute, detector in items:
        if attribute not in pc.ATTRIBUTES:
            raise MeasureSourceError(
                f"--measure names {attribute!r}: the attributes are {', '.join(pc.ATTRIBUTES)}"
            )
        if attribute in chosen:
            raise MeasureSourceError(f"--measure names {attribute} twice")
        if not detector:
            raise MeasureSourceError(f"--measure {attribute}= names no detector")
        chosen[attribute] = detector
    return chosen


def _has_value(name: str) -> Q:
    # A present, non-null value. Not KT(): SQLite's ->> spells a JSON null as the text 'null'.
    return Q(output__has_key=name) & ~Q(**{f"output__{name}": None})


def measurement_candidates(study: Study, versions: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """attribute -> the detectors (at ``versions``) with an ``ok`` prediction giving it a value
    on one of the study's pair images, sorted. One grouped query."""
    counts = (
        Prediction.objects.filter(
            of_versions(versions),
            kind=KIND_MEASUREMENTS,
            status=PredictionStatus.OK,
            image_id__in=ItemImage.objects.filter(item__study=study, role__in=PAIR_ROLES).values("image_id"),
        )
        .values("detector")
        .annotate(**{attribute: Count("pk", filter=_has_value(name)) for attribute, name in FIELDS.items()})
        .order_by("detector")
    )
    found: dict[str, list[str]] = {attribute: [] for attribute in pc.ATTRIBUTES}
    for row in counts:
        values: dict[str, Any] = dict(row)
        for attribute in pc.ATTRIBUTES:
            if values[attribute]:
                found[attribute].append(values["detector"])
    return {attribute: tuple(names) for attribute, names in found.items()}


@dataclass(frozen=True)
class MeasureSources:
    """Per attribute the detector read (None: nothing measures it), the versions read, and the
    candidates each attribute had."""

    sources: dict[str, str | None]
    versions: dict[str, str]
    candidates: dict[str, tuple[str, ...]]

    def source_versions(self) -> dict[str, str]:
        """detector -> version, for the detectors that are a source."""
        return {name: self.versions[name] for name in dict.fromkeys(self.sources.values()) if name}


def measurement_sources(
    study: Study,
    *,
    measure: str | Mapping[str, str] | None = None,
    detector: str | None = None,
    attributes: Sequence[str] = pc.ATTRIBUTES,
) -> MeasureSources:
    """The detector measuring each of ``attributes``; MeasureSourceError when it cannot be
    decided."""
    given = parse_measure(measure)
    from_study = parse_measure(
        study.parameters.get(MEASURE_KEY) if isinstance(study.parameters, dict) else None
    )
    # detector -> the version of its newest ``measurements`` prediction on the study's pairs.
    versions = latest_detector_versions(Scope(study), kinds=[KIND_MEASUREMENTS])
    candidates = measurement_candidates(study, versions)
    sources: dict[str, str | None] = {}
    for attribute in attributes:
        names = candidates[attribute]
        if attribute in given:
            chosen = given[attribute]
            if detector and chosen != detector:
                raise MeasureSourceError(
                    f"--measure {attribute}={chosen} and the detector filter {detector!r} disagree: "
                    "give one of them"
                )
            if chosen not in names:
                known = ", ".join(names) or "none"
                raise MeasureSourceError(
                    f"Detector {chosen!r} measures no {attribute} in study '{study.slug}' "
                    f"(detectors that do: {known})."
                )
            sources[attribute] = chosen
        elif detector:
            sources[attribute] = detector if detector in names else None
        elif attribute in from_study and from_study[attribute] in names:
            sources[attribute] = from_study[attribute]
        elif len(names) > 1:
            raise MeasureSourceError(
                f"Several detectors measure {attribute} in study '{study.slug}': {', '.join(names)}. "
                f"Choose one: --measure {attribute}={names[0]} (or the study parameter "
                f'"measure": {{"{attribute}": "{names[0]}"}}, or the detector filter).'
            )
        else:
            sources[attribute] = names[0] if names else None
    return MeasureSources(sources=sources, versions=versions, candidates=candidates)


@dataclass(frozen=True)
class PairRow:
    """One measured pair: the ``metrics`` pair (``pair_id`` = the item key) and, per role, the
    raw output of each source detector on that image (overlays, ``n_faces`` for the pages)."""

    item_id: int
    key: str
    t2i_model: str
    pair: pc.Pair
    images: dict[str, int]
    outputs: dict[str, dict[str, dict[str, Any]]] = field(repr=False)


@dataclass(frozen=True)
class LeftOutPair:
    """A pair not scored yet, and why (a source detector has not measured one of its images)."""

    item_id: int
    key: str
    t2i_model: str
    reason: str


@dataclass(frozen=True)
class PairMeasurements:
    """The pairs of a study (or of one of its T2I models) ready for ``metrics.pair_change``."""

    sources: MeasureSources
    rows: tuple[PairRow, ...]
    left_out: tuple[LeftOutPair, ...]
    models: tuple[str, ...]

    def by_model(self) -> dict[str, list[PairRow]]:
        """T2I model -> its measured pairs, every model in scope present (possibly empty)."""
        grouped: dict[str, list[PairRow]] = {model: [] for model in self.models}
        for row in self.rows:
            grouped[row.t2i_model].append(row)
        return grouped


def _side(
    key: str, role: str, outputs: Mapping[str, Mapping[str, Any]], sources: Mapping[str, str | None]
) -> pc.Measurement:
    """One image's measurement from its sources' outputs: each attribute from its own source;
    checked (ranges, no value without a face) by ``metrics.pair_change.measurement_from_dict``."""
    side = SIDE_NAMES[role]
    face = False
    values: dict[str, Any] = {"age": None, "gender": None, "skin_gray": None}
    for name, output in outputs.items():
        core: dict[str, Any] = {f: output.get(f) for f in ("face", *FIELDS.values())}
        if core["face"] is None:
            # A detector that does not say: a value means a face.
            core["face"] = any(core[f] is not None for f in FIELDS.values())
        face = pc.measurement_from_dict(core, item=f"pair '{key}', {side} measured by {name}").face or face
    for attribute, source in sources.items():
        if source is not None:
            values[FIELDS[attribute]] = outputs[source].get(FIELDS[attribute])
    return pc.measurement_from_dict({"face": face, **values}, item=f"pair '{key}', {side}")


def pair_measurements(
    study: Study,
    *,
    t2i_model: str | None = None,
    measure: str | Mapping[str, str] | None = None,
    detector: str | None = None,
    attributes: Sequence[str] = pc.ATTRIBUTES,
) -> PairMeasurements:
    """Every measured pair of ``study`` (of ``t2i_model`` when given), and the pairs left out with
    their reason."""
    if study.protocol != PROTOCOL:
        raise pc.PairChangeInputError(
            f"study '{study.slug}' is a {study.protocol} study, not a pair-change one"
        )
    sources = measurement_sources(study, measure=measure, detector=detector, attributes=attributes)
    used = sources.source_versions()
    items = Item.objects.filter(study=study)
    if t2i_model:
        items = items.filter(t2i_model=t2i_model)
    rows_in = list(
        items.order_by("t2i_model", "id").values_list(
            "id", "key", "t2i_model", "prompt__category", "prompt__word"
        )
    )
    links: dict[int, dict[str, int]] = defaultdict(dict)
    for item_id, role, image_id in ItemImage.objects.filter(item__in=items).values_list(
        "item_id", "role", "image_id"
    ):
        links[item_id][role] = image_id
    predictions: dict[int, dict[str, tuple[str, dict[str, Any], str]]] = defaultdict(dict)
    if used:
        # A subquery, not a list of ids: a study of 70,000 pairs would pass SQLite's parameter limit.
        image_ids = ItemImage.objects.filter(item__in=items, role__in=PAIR_ROLES).values("image_id")
        for image_id, name, status, output, error in (
            Prediction.objects.filter(of_versions(used), kind=KIND_MEASUREMENTS, image_id__in=image_ids)
            .values_list("image_id", "detector", "status", "output", "error")
            .order_by()
        ):
            predictions[image_id][name] = (status, output or {}, error)

    rows: list[PairRow] = []
    left_out: list[LeftOutPair] = []
    for item_id, key, model, domain, word in rows_in:
        images = links.get(item_id, {})
        for role in PAIR_ROLES:
            if role not in images:
                raise pc.PairChangeInputError(
                    f"pair '{key}' has no {SIDE_NAMES[role]} (an image of role {role}): "
                    "a pair needs both; import it again with both rows"
                )
        if not (domain or "").strip() or not (word or "").strip():
            raise pc.PairChangeInputError(
                f"pair '{key}' has no prompt word: its word is not in the study's prompt set "
                "(give the pair a prompt with its category = domain and word)"
            )
        outputs: dict[str, dict[str, dict[str, Any]]] = {role: {} for role in PAIR_ROLES}
        missing = ""
        for role in PAIR_ROLES:
            for name, version in used.items():
                found = predictions[images[role]].get(name)
                if found is None:
                    missing = missing or f"not measured by {name} yet"
                    continue
                status, output, error = found
                if status != PredictionStatus.OK:
                    raise pc.PairChangeInputError(
                        f"pair '{key}': the {SIDE_NAMES[role]} could not be measured by "
                        f"{name}@{version}: {error or 'failed'} (is the file decodable?)"
                    )
                outputs[role][name] = output
        if missing:
            left_out.append(LeftOutPair(item_id, key, model, missing))
            continue
        for name, output in outputs[ImageRole.INPUT].items():
            if output.get("face") is False:
                raise pc.PairChangeInputError(
                    f"pair '{key}': {name} found no face in the seed photo; every seed photo needs "
                    "one (remove the seed's pairs, or measure it with another detector)"
                )
        seed = _side(key, ImageRole.INPUT, outputs[ImageRole.INPUT], sources.sources)
        edit = _side(key, ImageRole.OUTPUT, outputs[ImageRole.OUTPUT], sources.sources)
        rows.append(
            PairRow(
                item_id=item_id,
                key=key,
                t2i_model=model,
                pair=pc.Pair(pair_id=key, word=word.strip(), domain=domain.strip(), seed=seed, output=edit),
                images=dict(images),
                outputs=outputs,
            )
        )
    models = tuple(dict.fromkeys(model for _, _, model, _, _ in rows_in))
    return PairMeasurements(sources=sources, rows=tuple(rows), left_out=tuple(left_out), models=models)


def bucket_names(attribute: str) -> tuple[str, ...]:
    """The sampling buckets of an attribute, in the order of its verdicts (gender's two
    no-change combinations share ``unchanged``)."""
    if attribute not in pc.ATTRIBUTES:
        raise SamplingError(f"attribute {attribute!r} is not one of {', '.join(pc.ATTRIBUTES)}")
    return tuple(dict.fromkeys(pc.verdict_bucket(attribute, v) for v in pc.VERDICT_LABELS[attribute]))  # type: ignore[misc]


def parse_buckets(attribute: str, text: str | None) -> dict[str, int]:
    """``"older=25,younger=25,unchanged=50"`` → sizes; empty → the paper's sizes for the
    attribute. Raises SamplingError for an unknown bucket, a repeated one or a size that is not
    a whole number ≥ 0."""
    names = bucket_names(attribute)
    if not text or not text.strip():
        return dict(pc.PAPER_SAMPLE_SIZES[attribute])
    sizes: dict[str, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, size = part.partition("=")
        name = name.strip()
        if not sep or name not in names:
            raise SamplingError(
                f"bucket {part.strip()!r}: use name=size with the {attribute} buckets {', '.join(names)}"
            )
        if name in sizes:
            raise SamplingError(f"bucket {name} is given twice")
        try:
            value = int(size.strip())
        except ValueError:
            value = -1
        if value < 0:
            raise SamplingError(f"bucket {name}: size {size.strip()!r} is not a whole number ≥ 0")
        sizes[name] = value
    if not sizes:
        raise SamplingError("--buckets names no bucket")
    return sizes


@dataclass(frozen=True)
class SampleDraw:
    """One draw: its ``record`` in ``Study.parameters["samples"]``, whether it is new, and what the
    pool held."""

    record: dict[str, Any]
    created: bool
    eligible: dict[str, int] = field(default_factory=dict)
    n_without_verdict: int = 0
    n_skipped: int = 0
    n_queued: int = 0

    @property
    def keys(self) -> list[str]:
        return [entry["item"] for entry in self.record["items"]]


def study_samples(study: Study) -> list[dict[str, Any]]:
    """The draws recorded on the study (``parameters["samples"]``), oldest first; [] when none."""
    samples = study.parameters.get(SAMPLES_KEY) if isinstance(study.parameters, dict) else None
    return [s for s in samples if isinstance(s, dict)] if isinstance(samples, list) else []


def _same_draw(record: Mapping[str, Any], ask: Mapping[str, Any]) -> bool:
    return all(record.get(name) == ask[name] for name in ("attribute", "seed", "buckets", "t2i_model"))


def _queue(items: Iterable[Item], attribute: str) -> int:
    """Put the items in the queue asking ``attribute``; returns how many rows changed."""
    changed = []
    for item in items:
        if item.queue > 0 and (not item.question_keys or attribute in item.question_keys):
            continue  # queued and asking it already
        item.question_keys = [*item.question_keys, attribute] if item.queue > 0 else [attribute]
        item.queue = max(item.queue, 1)
        changed.append(item)
    Item.objects.bulk_update(changed, ["queue", "question_keys"])
    return len(changed)


def pairs_sample(
    *,
    study: Study,
    attribute: str,
    sizes: Mapping[str, int] | None = None,
    seed: int = 0,
    t2i_model: str | None = None,
    measure: str | Mapping[str, str] | None = None,
    take_all_if_short: bool = False,
    dry_run: bool = False,
) -> SampleDraw:
    """Draw pairs of ``study`` for human checking of ``attribute``, stratified by verdict, and queue
    them (one transaction); a draw recorded before returns that one."""
    if study.protocol != PROTOCOL:
        raise SamplingError(
            f"Study '{study.slug}' is a {study.protocol} study: only pair-change studies draw pairs."
        )
    names = bucket_names(attribute)
    sizes = dict(pc.PAPER_SAMPLE_SIZES[attribute] if sizes is None else sizes)
    unknown = [name for name in sizes if name not in names]
    if unknown:
        raise SamplingError(f"{attribute} has no bucket {unknown[0]!r} (its buckets: {', '.join(names)})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SamplingError(f"seed {seed!r} is not a whole number ≥ 0")
    ask = {"attribute": attribute, "seed": seed, "buckets": sizes, "t2i_model": t2i_model or None}
    for record in study_samples(study):
        if _same_draw(record, ask):
            return SampleDraw(record=record, created=False)

    thresholds = study_thresholds(study)
    bands = pc.VerdictBands()
    measured = pair_measurements(study, t2i_model=t2i_model, measure=measure, attributes=(attribute,))
    source = measured.sources.sources[attribute]
    if source is None:
        raise SamplingError(
            f"No detector has measured {attribute} on the pairs of study '{study.slug}' yet: run "
            "run_detectors with a measurement detector (face_age_gender, skin_tone, facepp_measure) first."
        )
    drawn_before = {
        entry.get("item")
        for record in study_samples(study)
        if record.get("attribute") == attribute
        for entry in record.get("items", [])
        if isinstance(entry, dict)
    }
    state = {
        item_id: (queue, keys, seats)
        for item_id, queue, keys, seats in Item.objects.filter(study=study).values_list(
            "id", "queue", "question_keys", "completed_seats"
        )
    }
    buckets: dict[Hashable, str | None] = {}
    verdicts: dict[str, str] = {}
    n_skipped = n_without = 0
    for row in measured.rows:
        queue, keys, seats = state[row.item_id]
        labelled_without = seats > 0 and not (queue > 0 and (not keys or attribute in keys))
        if row.key in drawn_before or labelled_without:
            n_skipped += 1
            continue
        verdict = pc.pair_verdict(pc.score_pair(row.pair, thresholds), attribute, bands)
        if verdict is None:
            n_without += 1
            continue
        verdicts[row.key] = verdict
        buckets[row.key] = pc.verdict_bucket(attribute, verdict)
    eligible = dict(Counter(b for b in buckets.values() if b is not None))
    try:
        sample = pc.stratified_sample(buckets, sizes, seed, take_all_if_short=take_all_if_short)
    except pc.SampleTooSmallError as error:
        pool = ", ".join(f"{name} {eligible.get(name, 0)}" for name in names)
        raise SamplingError(
            f"{error} for {attribute} (pool: {pool}). Ask for fewer, or --take-all-if-short."
        ) from None
    record = {
        **ask,
        "source": {"detector": source, "version": measured.sources.versions[source]},
        "thresholds": thresholds.as_dict(),
        "bands": {"changed_above": bands.changed_above, "unchanged_below": bands.unchanged_below},
        "items": [
            {"item": key, "verdict": verdicts[key], "bucket": buckets[key]} for key in map(str, sample.ids)
        ],
        "shortfall": dict(sample.shortfall),
        "drawn_at": timezone.now().isoformat(timespec="seconds"),
    }
    draw = SampleDraw(
        record=record,
        created=not dry_run,
        eligible=eligible,
        n_without_verdict=n_without,
        n_skipped=n_skipped,
    )
    if dry_run:
        return draw
    with transaction.atomic():
        locked = Study.objects.select_for_update().get(pk=study.pk)
        for existing in study_samples(locked):
            if _same_draw(existing, ask):  # a concurrent run recorded it first
                study.parameters = locked.parameters
                return SampleDraw(record=existing, created=False)
        chosen = {row.key: row.item_id for row in measured.rows if row.key in set(draw.keys)}
        n_queued = _queue(Item.objects.filter(pk__in=chosen.values()).order_by("id"), attribute)
        parameters = dict(locked.parameters) if isinstance(locked.parameters, dict) else {}
        parameters[SAMPLES_KEY] = [*study_samples(locked), record]
        locked.parameters = parameters
        locked.save(update_fields=["parameters"])
        study.parameters = parameters
    return replace(draw, created=True, n_queued=n_queued)
