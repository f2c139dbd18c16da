"""The estimate as one table per study (a row per T2I model), for ``estimate_bias --format
md|csv`` and the estimate page."""

from __future__ import annotations

from protocols.gender.estimate_frame import StudyEstimate
from reports.tables import Table, ci_field, num_field, raw_cell, text_field, value_field

FIELDS = (
    text_field("t2i_model", "T2I model"),
    # The bias-corrected estimate: the point that lies inside the interval beside it.
    num_field("estimate", "Estimate", ("model_bias_score", "bias_corrected")),
    ci_field("ci95", "95 % interval", ("model_bias_score", "ci95"), 3),
    # The plug-in (eq. 1 on the estimated shares): biased upward when labels are few.
    num_field("plug_in", "Plug-in", ("model_bias_score", "estimate")),
    num_field("human_only", "Labels only", ("human_only", "bias_corrected")),
    ci_field("human_only_ci95", "Labels-only 95 % interval", ("human_only", "ci95"), 3),
    num_field("detector_only", "Detector only"),
    num_field("lambda", "λ", digits=2),
    num_field("effective_labels", "Effective labels", digits=0),
    *(
        value_field(key, label, raw_cell)
        for key, label in (
            ("n_labelled", "Labelled"),
            ("n_images", "Images"),
            ("rounds", "Rounds"),
            ("labels_for_half_width", "Labels to halve"),
        )
    ),
)


def summary_table(estimate: StudyEstimate) -> Table:
    return Table.of(
        "bias_estimate",
        f"Model bias score estimated from {estimate.detector}@{estimate.version} and sampled labels",
        "Estimate: the detector on every image, corrected by the sampled human labels, with the "
        "detector weighted by λ (0: labels alone, 1: the detector's full weight; chosen from the data "
        "to make the interval narrow), bias-corrected by the design bootstrap so that it lies in its 95 % "
        "interval. Plug-in: the same score without that correction (too high when labels are few). "
        "Labels only: the sampled labels alone. Effective labels: how many labels alone would give "
        "the same precision.",
        FIELDS,
        (model.as_json([]) | {"t2i_model": model.t2i_model} for model in estimate.models),
    )
