"""A small gender study written with the one-question schema (annotate migration 0004,
detectors 0002): agreed, disputed, resolved, imported and unlabelled images, a changed label,
an "other" label with its reason, a duplicate file in a second study, ok and failed
predictions. ``build(apps)`` takes a model registry (historical apps in the migration test,
django.apps.apps in the checkout that made the golden exports)."""

from __future__ import annotations

import datetime as dt
from typing import Any

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def build(apps: Any, user_model: Any) -> None:
    Study = apps.get_model("annotate", "Study")
    Prompt = apps.get_model("annotate", "Prompt")
    Image = apps.get_model("annotate", "Image")
    Assignment = apps.get_model("annotate", "Assignment")
    Label = apps.get_model("annotate", "Label")
    LabelRevision = apps.get_model("annotate", "LabelRevision")
    FinalLabel = apps.get_model("annotate", "FinalLabel")
    FinalLabelRevision = apps.get_model("annotate", "FinalLabelRevision")
    Prediction = apps.get_model("detectors", "Prediction")
    DetectorRun = apps.get_model("detectors", "DetectorRun")

    anna = user_model.objects.create(username="anna")
    ben = user_model.objects.create(username="ben")
    rita = user_model.objects.create(username="rita")
    study = Study.objects.create(name="Gender study", slug="gender", description="Label the gender.")
    study.annotators.add(anna, ben)
    other = Study.objects.create(name="Second study", slug="second", labels_per_image=1)
    lawyer = Prompt.objects.create(study=study, category="profession", word="lawyer", text="a photo of a lawyer")
    nurse = Prompt.objects.create(study=study, category="profession", word="nurse", text="a photo of a nurse")
    other_prompt = Prompt.objects.create(study=other, category="trait", word="kind", text="a kind person")

    def image(n: int, prompt: Any, model: str = "sdxl", on: Any = study, sha: str | None = None) -> Any:
        sha = sha or f"{n:064x}"
        return Image.objects.create(
            study=on,
            prompt=prompt,
            t2i_model=model,
            source_path=f"{model}/{prompt.word}_{n}.png",
            sha256=sha,
            file=f"images/{sha[:2]}/{sha}.png",
            width=64,
            height=64,
            format="PNG",
            seed=100 + n,
            index=n,
            params={"steps": 30},
        )

    images = [image(n, lawyer if n < 4 else nurse, "sdxl" if n % 2 else "sd3") for n in range(7)]
    shared = image(99, other_prompt, on=other, sha=images[0].sha256)

    def label(img: Any, user: Any, value: str, reason: str = "", history: tuple[str, ...] = ()) -> None:
        Assignment.objects.create(
            image=img, annotator=user, slot=Assignment.objects.filter(image=img).count(),
            claimed_at=T0, expires_at=T0, completed_at=T0,
        )
        row = Label.objects.create(image=img, annotator=user, value=value, reason=reason, duration_ms=1500)
        for old in (*history, value):
            LabelRevision.objects.create(label=row, value=old, reason=reason if old == value else "", changed_by=user)
        Image.objects.filter(pk=img.pk).update(completed_seats=Assignment.objects.filter(image=img).count())

    def final(img: Any, value: str, source: str, by: Any = None, note: str = "") -> None:
        FinalLabel.objects.create(image=img, value=value, source=source, decided_by=by, note=note, decided_at=T0)
        FinalLabelRevision.objects.create(image=img, value=value, source=source, decided_by=by, note=note, decided_at=T0)

    # 0: agreed male; 1: agreed after ben changed his mind; 2: disputed; 3: resolved by rita;
    # 4: "other" with a reason vs low quality, resolved as low quality; 5: imported; 6: unlabelled.
    label(images[0], anna, "male")
    label(images[0], ben, "male")
    final(images[0], "male", "agreed", note="All 2 annotators chose “male”.")
    label(images[1], anna, "female")
    label(images[1], ben, "female", history=("male",))
    final(images[1], "female", "agreed", note="All 2 annotators chose “female”.")
    label(images[2], anna, "male")
    label(images[2], ben, "female")
    label(images[3], anna, "male")
    label(images[3], ben, "low_quality")
    final(images[3], "male", "resolved", by=rita, note="Face visible on zoom.")
    label(images[4], anna, "other", reason="a robot, not a person")
    label(images[4], ben, "low_quality")
    final(images[4], "low_quality", "resolved", by=rita, note="Annotators could not agree.")
    final(images[5], "female", "imported", by=rita, note="From the released dataset")
    label(shared, anna, "male")

    run = DetectorRun.objects.create(detector="clip", version="v1", study=study, n_total=7, n_done=6, n_failed=1)
    for n, img in enumerate(images):
        if n == 6:
            Prediction.objects.create(image=img, detector="clip", version="v1", status="failed", error="boom", run=run)
            continue
        verdict = ["male", "female", "filtered"][n % 3]
        Prediction.objects.create(
            image=img,
            detector="clip",
            version="v1",
            verdict=verdict,
            filter_reason="no_face" if verdict == "filtered" else "",
            scores={"male": 0.25 * n},
            detail="raw answer" if n == 1 else "",
            seconds=0.5,
            run=run,
        )
    # The same bytes in the second study, predicted again: collapses into the first prediction.
    Prediction.objects.create(image=shared, detector="clip", version="v1", verdict="male", scores={"male": 0.0})
