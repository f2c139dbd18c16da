"""Acceptance: a questions study with a judge, end to end through the commands (create_study,
import_images, import_predictions of a judge's answers with probabilities, import_labels from two
annotators, bias_report --format json), its judge figures recomputed from the same raw answers
with scikit-learn, statsmodels and a plain 10-bin ECE written here."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import call_command
from sklearn.metrics import accuracy_score, brier_score_loss, cohen_kappa_score, confusion_matrix
from statsmodels.stats.proportion import proportion_confint

from tests.studies.protocol_data import one_image_manifest, write_csv

pytestmark = pytest.mark.django_db

N = 36
JUDGE = "vlm_judge@p1"
QUESTIONS = {"age": ("young", "middle", "old"), "smile": ("yes", "no")}
QUESTIONS_CSV = [
    ["age", "How old does the person look?", "young:Young:y|middle:Middle-aged:m|old:Old:o"],
    ["smile", "Is the person smiling?", "yes:Yes:y|no:No:n"],
]
SKIN = ["light" if i % 2 else "dark" for i in range(N)]
MODEL = ["sdxl" if i % 3 else "dalle" for i in range(N)]  # as one_image_manifest names them
#: The second annotator disagrees on these (question, image): no final answer there.
DISAGREE = {("age", 4), ("age", 17), ("smile", 9)}
FAILED = 7  # the judge's prediction of this image failed
PLAIN = 11  # the judge answered this image without probabilities


def _command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _probabilities(rng: np.random.Generator, truth: int, k: int) -> list[float]:
    """A judge's belief: leaning to the truth 2 times in 3, rounded to 3 decimals, its largest
    probability never on an edge of the ten bins (so any binning convention agrees)."""
    while True:
        centre = truth if rng.random() < 2 / 3 else int(rng.integers(k))
        p = rng.dirichlet(np.ones(k) + 3 * np.eye(k)[centre]).round(3)
        p[-1] = round(1 - p[:-1].sum(), 3)
        top = p.max() * 10
        if p.min() >= 0 and abs(top - round(top)) > 1e-3:
            return [float(x) for x in p]


@pytest.fixture
def raw():
    """The raw answers: people's truth per question and image, and the judge's probabilities."""
    rng = np.random.default_rng(34)
    truth = {q: [values[int(rng.integers(len(values)))] for _ in range(N)] for q, values in QUESTIONS.items()}
    probabilities = {
        q: [
            dict(zip(values, _probabilities(rng, values.index(truth[q][i]), len(values)), strict=True))
            for i in range(N)
        ]
        for q, values in QUESTIONS.items()
    }
    return truth, probabilities


def _answer(p: dict[str, float]) -> str:
    return max(p, key=p.__getitem__)


def _run_study(tmp_path, truth, probabilities) -> dict:
    questions = write_csv(tmp_path / "questions.csv", ["key", "text", "choices"], QUESTIONS_CSV)
    _command(
        "create_study", "acc", "--protocol", "questions", "--questions", str(questions),
        "--compare", "skin", "--labels-per-item", "2",
    )  # fmt: skip
    manifest, root = one_image_manifest(tmp_path, N, extra={"skin": SKIN})
    _command("import_images", "--manifest", str(manifest), "--root", str(root), "--study", "acc")
    rows = []
    for i in range(N):
        if i == FAILED:
            rows.append([f"{i}.png", "vlm_judge", "answers", "", "p1", "failed", "server error"])
            continue
        said = {q: _answer(probabilities[q][i]) for q in QUESTIONS}
        output = (
            {"answers": said}
            if i == PLAIN
            else {"answers": said, "probabilities": {q: probabilities[q][i] for q in QUESTIONS}}
        )
        rows.append([f"{i}.png", "vlm_judge", "answers", json.dumps(output), "p1", "ok", ""])
    predictions = write_csv(
        tmp_path / "predictions.csv",
        ["image", "detector", "kind", "output", "version", "status", "error"],
        rows,
    )
    _command("import_predictions", str(predictions), "--study", "acc")
    labels = []
    for q, values in QUESTIONS.items():
        for i in range(N):
            other = values[(values.index(truth[q][i]) + 1) % len(values)]
            labels.append([f"{i}.png", "anna", q, truth[q][i]])
            labels.append([f"{i}.png", "ben", q, other if (q, i) in DISAGREE else truth[q][i]])
    path = write_csv(tmp_path / "labels.csv", ["image", "annotator", "question", "label"], labels)
    _command("import_labels", str(path), "--study", "acc", "--add-annotators")
    return json.loads(_command("bias_report", "--study", "acc", "--format", "json"))


def _ece(confidence: list[float], correct: list[bool], bins: int = 10) -> float:
    """Top-label expected calibration error: Σ_b (n_b / n) |accuracy_b - mean confidence_b|."""
    conf, hit = np.array(confidence), np.array(correct, dtype=float)
    which = np.minimum((conf * bins).astype(int), bins - 1)
    return float(
        sum(
            np.mean(which == b) * abs(hit[which == b].mean() - conf[which == b].mean())
            for b in np.unique(which)
        )
    )


def test_the_judge_figures_of_the_report_equal_scikit_learn_and_statsmodels_on_the_same_answers(
    tmp_path, raw
):
    truth, probabilities = raw
    report = _run_study(tmp_path, truth, probabilities)
    for q, values in QUESTIONS.items():
        # Item by item: the images with a final answer (both annotators agree) and the judge's.
        both = [i for i in range(N) if (q, i) not in DISAGREE and i != FAILED]
        people = [truth[q][i] for i in both]
        judge = [_answer(probabilities[q][i]) for i in both]
        figures = report["judges"][JUDGE][q]
        assert figures["n"] == len(both)
        assert figures["accuracy"] == pytest.approx(accuracy_score(people, judge))
        assert figures["cohen_kappa"] == pytest.approx(cohen_kappa_score(people, judge))
        matrix = confusion_matrix(people, judge, labels=list(values))
        assert figures["confusion"] == {
            a: {b: int(matrix[r, c]) for c, b in enumerate(values)} for r, a in enumerate(values)
        }
        # Calibration: the items whose output carries probabilities.
        scored = [i for i in both if i != PLAIN]
        y = [truth[q][i] for i in scored]
        if len(values) == 2:
            brier = brier_score_loss(y, [probabilities[q][i]["yes"] for i in scored], pos_label="yes")
        else:
            ordered = sorted(values)  # scikit-learn's column order
            brier = brier_score_loss(
                y, [[probabilities[q][i][v] for v in ordered] for i in scored], labels=ordered
            )
        assert figures["n_probabilities"] == len(scored)
        assert figures["brier"] == pytest.approx(brier)
        confidence = [max(probabilities[q][i].values()) for i in scored]
        correct = [_answer(probabilities[q][i]) == truth[q][i] for i in scored]
        assert figures["ece"] == pytest.approx(_ece(confidence, correct))
        # The judge's picture per T2I model and group: every image it answered, Wilson intervals.
        for model in ("sdxl", "dalle"):
            groups = report["questions"][q][model]["judges"][JUDGE]["groups"]
            for group in ("light", "dark"):
                answered = [i for i in range(N) if MODEL[i] == model and SKIN[i] == group and i != FAILED]
                said = [_answer(probabilities[q][i]) for i in answered]
                cell = groups[group]
                assert cell["n"] == len(answered)
                for a in values:
                    count = said.count(a)
                    assert cell["shares"][a] == pytest.approx(count / len(answered))
                    lo, hi = proportion_confint(count, len(answered), alpha=0.05, method="wilson")
                    assert cell["ci95"][a] == pytest.approx([lo, hi], abs=1e-9)
