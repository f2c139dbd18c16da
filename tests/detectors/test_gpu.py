"""The detectors on a CUDA device give what they give on the CPU (tiny models the tests build).

Marked ``gpu``: skipped, saying why, where torch sees no CUDA device (CI and the development
machines); run them on a GPU machine with ``pytest -m gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from detectors.plugins.clip import ClipDetector

pytestmark = pytest.mark.gpu


def _images(n: int) -> list[Image.Image]:
    return [Image.new("RGB", (40 + 7 * i, 30 + 5 * i), (30 * i % 255, 90, 200 - 20 * i)) for i in range(n)]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_clip_on_cuda_gives_the_cpu_verdicts_and_scores(tiny_clip: Path, dtype: str):
    images = _images(6)
    on_cpu = ClipDetector(device="cpu")
    on_cpu.load()
    on_gpu = ClipDetector(device="cuda", dtype=dtype, batch_size=4)
    on_gpu.load()
    expected = on_cpu.predict(images)
    outputs = on_gpu.predict(images)
    # bf16 keeps ~3 significant digits; fp32 on the GPU differs from the CPU in the last bits.
    tolerance = 2e-2 if dtype == "bf16" else 1e-4
    for got, want in zip(outputs, expected, strict=True):
        assert got.scores["p_male"] == pytest.approx(want.scores["p_male"], abs=tolerance)
        assert got.scores["p_female"] == pytest.approx(want.scores["p_female"], abs=tolerance)
        if abs(want.scores["p_male"] - want.scores["p_female"]) > 2 * tolerance:
            assert got.verdict == want.verdict
