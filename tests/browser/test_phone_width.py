"""Every researcher page fits a phone: at 375 x 812 CSS pixels the page itself
never scrolls sideways — wide tables scroll inside their own frame, the navigation wraps, figures
and images shrink to the screen. Each page is seeded so its tables are as wide as in a real
study (four protocols, detectors, disputes, long prompts and item keys)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotate.models import Label
from tests.browser.screenshots import screenshots_dir
from tests.factories import ItemFactory, LabelFactory, PromptFactory
from tests.reports import attributes_data, dashboard_data, pair_change_data
from tests.reports.test_objects_report import build as objects_build

pytestmark = pytest.mark.browser

PHONE = {"width": 375, "height": 812}

# The widest element and what overflows, to say which part of a page is at fault.
OVERFLOW = """() => {
  const width = window.innerWidth;
  const over = [];
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.right > width + 1 && !el.closest('.scroll, .table-scroll, [data-zoom-viewport]')) {
      over.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
                (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '') +
                ' right=' + Math.round(box.right));
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, over: over.slice(0, 8)};
}"""


@pytest.fixture
def researcher_data(study, annotator_a, annotator_b, annotator_c):
    """A gender study with detectors and open disputes (long prompts and keys), a GEP study, a
    pair-change study and an object study."""
    gender = dashboard_data.build(study, annotator_a, annotator_b)
    long_prompt = PromptFactory(
        study=study,
        category="professional-occupations-and-roles",
        word="chief-executive-officer-of-a-multinational",
        text="a photo of one real person who is a chief executive officer of a multinational company",
    )
    for index in range(3):
        item = ItemFactory(
            prompt=long_prompt,
            t2i_model="stable-diffusion-xl-base-1.0-refiner",
            key=f"stable-diffusion-xl-base-1.0-refiner/very_long_item_key_without_breaks_{index:05d}.png",
        )
        LabelFactory(item=item, annotator=annotator_a, value="male")
        LabelFactory(item=item, annotator=annotator_b, value="other", reason="a mannequin in a shop window")
    attributes_data.build(attributes_data.attributes_study(), [annotator_a, annotator_b, annotator_c])
    pair_change_data.build(slug="bp")
    objects_build()
    disputed = Label.objects.filter(value="other").values_list("item_id", flat=True).first()
    return gender, disputed


def _pages(gender, disputed) -> list[str]:
    item = gender.items[0].pk
    return [
        reverse("reports:overview") + "?study=gender",
        reverse("reports:overview") + "?study=gender&category=place",
        reverse("reports:heatmap") + "?study=gender",
        reverse("reports:prompt", args=[gender.lawyer.pk]),
        reverse("reports:detector", args=["fake"]) + "?study=gender",
        reverse("reports:overview") + "?choose=1",  # several studies: the page asks which
        reverse("reports:overview") + "?study=gep",
        reverse("reports:overview") + "?study=bp",
        reverse("reports:overview") + "?study=cooccur",
        reverse("annotate:agreement"),
        reverse("annotate:agreement", args=["gender"]),
        reverse("annotate:annotator_stats", args=["gender"]),
        reverse("annotate:disputes"),
        reverse("annotate:dispute", args=[disputed]),
        reverse("annotate:images"),
        reverse("annotate:images", args=["gender"]),
        reverse("annotate:image", args=[item]),
        reverse("annotate:image", args=[disputed]),
        reverse("detectors:runs"),
    ]


def test_every_researcher_page_fits_a_375_pixel_wide_phone(
    browser, login, live_server, researcher_data, researcher
):
    gender, disputed = researcher_data
    # Not is_mobile: a mobile viewport zooms out to fit an overflowing page, which hides the
    # overflow from innerWidth; a 375 px desktop window shows it as a phone user scrolls it.
    context = browser.new_context(viewport=PHONE, device_scale_factor=2)
    context.set_default_timeout(20_000)
    page = context.new_page()
    login(page, live_server, researcher)
    too_wide = {}
    for url in _pages(gender, disputed):
        response = page.goto(f"{live_server.url}{url}")
        assert response.status == 200, url
        page.wait_for_load_state("load")
        measured = page.evaluate(OVERFLOW)
        assert measured["innerWidth"] == PHONE["width"]
        if measured["scrollWidth"] > measured["innerWidth"]:
            too_wide[url] = measured
    page.goto(f"{live_server.url}{reverse('reports:overview')}?study=gender")
    page.screenshot(path=str(screenshots_dir() / "phone-report.png"), full_page=True)
    # The wide tables are still all there: they scroll inside their own frame.
    frame = page.evaluate(
        """() => { const s = document.querySelector('#table-model_bias .scroll');
        return {sw: s.scrollWidth, cw: s.clientWidth}; }"""
    )
    assert frame["sw"] > frame["cw"]
    page.wait_for_load_state("networkidle")
    context.close()
    assert too_wide == {}
