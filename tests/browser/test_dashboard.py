"""A researcher opens the dashboard, narrows it with the htmx filter form, reads the heatmap,
clicks down to a prompt's images and to a detector's disagreements. Screenshots of each page are
saved as dashboard-*.png (tests/browser/screenshots.py) for the docs and slides.

The study mimics the paper at a small scale: 3 T2I models x 14 prompts x 6 images, final labels
drawn from the paper's table 7 scores (seeded), and three detectors with the paper's failure
modes (one never filters, two filter with face detection).
"""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image as PILImage

from annotate.models import FinalLabelSource
from tests.browser.screenshots import screenshots_dir
from tests.factories import (
    FinalLabelFactory,
    ImageFactory,
    ItemFactory,
    LabelFactory,
    PredictionFactory,
    PromptFactory,
    image_of,
)

pytestmark = pytest.mark.browser

MODELS = ("sdxl", "sd3", "dreamlike")
# (category, word, paper table 7 prompt bias score for SDXL, SD3, Dreamlike)
PROMPTS = [
    ("profession", "CEO", (1.0, 1.0, 1.0)),
    ("profession", "engineer", (0.89, 0.90, 1.0)),
    ("profession", "lawyer", (0.90, 1.0, -0.80)),
    ("profession", "teacher", (0.44, -0.56, -0.90)),
    ("profession", "nurse", (-0.90, -1.0, -1.0)),
    ("profession", "housekeeper", (-1.0, -1.0, -1.0)),
    ("personality", "ambitious", (1.0, 0.80, 0.69)),
    ("personality", "kind", (0.41, -0.37, -0.20)),
    ("personality", "bossy", (-0.11, -0.26, -1.0)),
    ("activity", "crying", (-0.67, -0.10, -1.0)),
    ("object", "tie", (1.0, 1.0, 1.0)),
    ("object", "cup", (0.08, -0.47, -1.0)),
    ("place", "gym", (0.89, 1.0, 0.20)),
    ("place", "library", (1.0, -0.40, -0.67)),
]
PER_PROMPT = 6
# Detector behaviour: (probability it filters a low-quality image, filters a clear one, right gender).
DETECTORS = {"clip": (0.0, 0.0, 0.95), "fairface": (0.7, 0.03, 0.96), "clip_enhance": (0.85, 0.03, 0.98)}


def _photos() -> dict[str, bytes]:
    """Real photographs shipped with scikit-image, as 160 px PNGs: thumbnails look like images."""
    from skimage import data

    def png(array) -> bytes:
        image = PILImage.fromarray(array).convert("RGB")
        image.thumbnail((160, 160))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue()

    return {
        "female": png(data.astronaut()),
        "male": png(data.camera()),
        "low_quality": png(data.coffee()),
        "other": png(data.rocket()),
    }


def _stored(photos: dict[str, bytes], kind: str, n: int) -> tuple[str, str]:
    """Write the photo once; every image row gets its own hash (unique across files)."""
    digest = hashlib.sha256(photos[kind]).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(photos[kind])
    return hashlib.sha256(f"{digest}-{n}".encode()).hexdigest(), name


@pytest.fixture
def paper_like_study(study, annotator_a, annotator_b):
    rnd = random.Random(7)
    photos = _photos()
    n = 0
    lawyer = None
    for category, word, scores in PROMPTS:
        prompt = PromptFactory(study=study, category=category, word=word)
        lawyer = prompt if word == "lawyer" else lawyer
        for model, score in zip(MODELS, scores, strict=True):
            for index in range(PER_PROMPT):
                n += 1
                if rnd.random() < 0.13:
                    final = "low_quality"
                else:
                    final = "male" if rnd.random() < (1 + score) / 2 else "female"
                item = ItemFactory(
                    study=study, prompt=prompt, t2i_model=model, index=index,
                    image=ImageFactory(_stored=_stored(photos, final, n), width=160, height=160),
                )  # fmt: skip
                if n % 97 == 0:
                    continue  # a few items still wait for their labels
                FinalLabelFactory(item=item, value=final, source=FinalLabelSource.AGREED)
                if prompt is lawyer:
                    LabelFactory(item=item, annotator=annotator_a, value=final)
                    LabelFactory(item=item, annotator=annotator_b, value=final)
                for detector, (filter_lq, filter_clear, right) in DETECTORS.items():
                    clear = final in ("male", "female")
                    if rnd.random() < (filter_clear if clear else filter_lq):
                        PredictionFactory(
                            image=image_of(item),
                            detector=detector,
                            output={"label": "filtered", "reason": "no_face", "scores": {}},
                        )
                        continue
                    if clear:
                        verdict = (
                            final if rnd.random() < right else {"male": "female", "female": "male"}[final]
                        )
                    else:
                        verdict = "male" if rnd.random() < 0.7 else "female"
                    PredictionFactory(
                        image=image_of(item),
                        detector=detector,
                        output={"label": verdict, "reason": "", "scores": {}},
                    )
    return study, lawyer


def _shot(page, name: str) -> Path:
    path = screenshots_dir() / f"dashboard-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def test_researcher_reads_the_dashboard_heatmap_and_drills_down(
    page, login, live_server, paper_like_study, researcher, settings
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    _study, lawyer = paper_like_study
    page.set_viewport_size({"width": 1440, "height": 900})
    # The overview computes 1,000 bootstrap resamples per (model, detector) on every load; on a
    # shared 2-core machine that can pass the 10 s default, which is not what this test is about.
    page.set_default_timeout(45_000)
    page.set_default_navigation_timeout(45_000)
    login(page, live_server, researcher)

    # Home sends researchers to the overview: coverage, table 1 with best/worst marked, figures.
    page.goto(f"{live_server.url}/")
    page.locator("#coverage").wait_for()
    assert "Reports use the final labels that exist" in page.locator("#coverage").inner_text()
    assert page.locator("#table-model_bias td.mark-best").count() == 3
    assert page.locator("figure.chart img").first.evaluate("img => img.naturalWidth") > 300
    _shot(page, "overview")

    # The filter form swaps only the results region (htmx) and keeps the URL linkable.
    page.select_option("select[name=t2i_model]", "sd3")
    page.wait_for_url("**t2i_model=sd3**")
    page.locator("#table-label_shares tbody tr").first.wait_for()
    assert page.locator("#table-label_shares tbody tr").count() == 1
    assert page.locator("select[name=t2i_model]").input_value() == "sd3"
    page.select_option("select[name=t2i_model]", "")
    page.wait_for_function("() => !location.search.includes('t2i_model=sd3')")

    # Heatmap page: the figure, the histogram and the clickable table.
    page.click("nav.report-nav >> text=Prompt heatmap")
    page.locator("table.heat").wait_for()
    page.wait_for_function("() => document.querySelector('figure.heatmap-figure img').complete")
    assert page.locator("figure.heatmap-figure img").evaluate("img => img.naturalWidth") > 500
    _shot(page, "heatmap")

    # Click a word: its images, both annotators' labels, final label, every detector's verdict.
    page.click(f"table.heat a[href*='/reports/prompts/{lawyer.pk}/']")
    page.locator("table.images-side-by-side").wait_for()
    assert page.locator("table.images-side-by-side img.thumb").count() == len(MODELS) * PER_PROMPT
    assert page.locator("text=anna:").count() > 0
    _shot(page, "prompt")

    # A detector: its confusion with the human labels and the gallery of disagreements.
    page.click("nav.report-nav >> text=clip")
    page.locator("#gallery").wait_for()
    page.click("#gallery .kinds a:has-text('Wrong gender')")
    page.wait_for_url("**kind=wrong_gender**")
    page.locator("#gallery .kinds a[aria-current]:has-text('Wrong gender')").wait_for()
    _shot(page, "detector")
