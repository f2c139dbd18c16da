"""Truth inference with crowd-kit (Dawid-Skene, GLAD, MACE), imported on first use."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

METHODS = ("dawid_skene", "glad", "mace")


@dataclass(frozen=True)
class Inference:
    """Each unit's most probable answer and its posterior; each worker's reliability and confusion."""

    answers: dict[Hashable, str]
    posteriors: dict[Hashable, float]
    reliability: dict[str, float]
    confusion: dict[str, tuple[tuple[str, ...], tuple[tuple[float, ...], ...]]]


def _model(method: str) -> Any:
    from crowdkit.aggregation import GLAD, MACE, DawidSkene

    models = {"dawid_skene": DawidSkene, "glad": GLAD, "mace": MACE}
    if method not in models:
        raise ValueError(f"Unknown truth-inference method “{method}” (known: {', '.join(METHODS)}).")
    return models[method]()


def crowdkit_fit(rows: Sequence[tuple[Hashable, str, str]], method: str) -> tuple[Any, Any]:
    """crowd-kit's own result on (unit, worker, label) rows, indexed by the units' positions."""
    import pandas as pd

    units = list(dict.fromkeys(unit for unit, _, _ in rows))
    index = {unit: position for position, unit in enumerate(units)}
    frame = pd.DataFrame(
        [(index[unit], str(worker), str(label)) for unit, worker, label in rows],
        columns=["task", "worker", "label"],
    )
    model = _model(method)
    model.fit(frame)
    return model.labels_, model.probas_


def infer_truth(
    rows: Sequence[tuple[Hashable, str, str]], method: str, answers: Sequence[str] = ()
) -> Inference:
    """Fit ``method`` to the (unit, worker, label) rows; ``answers`` orders the confusion matrices."""
    if method not in METHODS:
        raise ValueError(f"Unknown truth-inference method “{method}” (known: {', '.join(METHODS)}).")
    if not rows:
        return Inference({}, {}, {}, {})
    units = list(dict.fromkeys(unit for unit, _, _ in rows))
    labels, probas = crowdkit_fit(rows, method)
    order = tuple(answers) + tuple(sorted({str(label) for _, _, label in rows} - set(answers)))
    columns = [str(column) for column in probas.columns]
    table = {
        int(task): dict(zip(columns, map(float, values), strict=True))
        for task, values in zip(probas.index, probas.to_numpy(), strict=True)
    }
    chosen = {int(task): str(label) for task, label in labels.items()}
    result_answers = {unit: chosen[position] for position, unit in enumerate(units)}
    posteriors = {unit: table[position].get(chosen[position], 0.0) for position, unit in enumerate(units)}
    position_of = {unit: position for position, unit in enumerate(units)}
    given: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, list[list[float]]] = {}
    where = {answer: i for i, answer in enumerate(order)}
    for unit, worker, label in rows:
        probabilities = table[position_of[unit]]
        given[str(worker)].append(probabilities.get(str(label), 0.0))
        matrix = counts.setdefault(str(worker), [[0.0] * len(order) for _ in order])
        for truth, p in probabilities.items():
            if truth in where:
                matrix[where[truth]][where[str(label)]] += p
    return Inference(
        answers=result_answers,
        posteriors=posteriors,
        reliability={worker: sum(ps) / len(ps) for worker, ps in given.items()},
        confusion={worker: (order, tuple(tuple(row) for row in matrix)) for worker, matrix in counts.items()},
    )
