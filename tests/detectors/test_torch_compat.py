from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings

PROBE = """
from detectors.torch_compat import ensure_torchvision
ensure_torchvision()
import torch, torchvision
boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10.5]], dtype=torch.float)
scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
print(torchvision.ops.nms(boxes, scores, 0.5).tolist())
print(torchvision.ops.nms(torch.empty((0, 4)), torch.empty((0,)), 0.5).tolist())
"""


@pytest.mark.subprocess
def test_torchvision_nms_works_next_to_the_cpu_torch():
    # Run in a fresh interpreter: the shim must be applied before torchvision's first import.
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # Highest score first; overlapping boxes suppressed; the far box kept.
    assert out[-2] == "[3, 2]"
    assert out[-1] == "[]"
