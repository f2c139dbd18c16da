"""What the detector and generation benchmarks share.

The bench scripts run as ``.venv/bin/python bench/<name>.py``, so this folder is on ``sys.path``
and they import this module as ``_common``. Importing it puts the repository root on
``sys.path`` (for ``detectors``, ``config``, ``tests.fakes``) and sets the offline switches —
nothing a benchmark does may touch the network (a machine without internet waits on hub retries).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
}.items():
    os.environ.setdefault(_name, _value)

#: ViT-L/14 at 224 px: ~81 GMAC ≈ 162 GFLOP per image.
VIT_L14_GFLOP = 162.0
#: Images/s an H100 SXM's dense bf16 peak (~989 TFLOP/s) allows for ViT-L/14.
H100_BOUND = 6100.0


def vit_l14_config(*, tiny: bool = False) -> Any:
    """The vision tower of openai/clip-vit-large-patch14 (random weights cost the same), or with
    ``tiny`` a 2-layer, hidden-64 ViT at the same 224 px / patch 14, to check code paths on a CPU."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    from transformers import CLIPVisionConfig

    if tiny:
        return CLIPVisionConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=224,
            patch_size=14,
            projection_dim=32,
        )
    return CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=224,
        patch_size=14,
        projection_dim=768,
    )


def sync(device: str) -> None:
    """Wait for queued GPU work, so a timer around it measures the work, not its launch."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if str(device).startswith("cuda") else f"CPU x{os.cpu_count()}"


def load_average() -> str:
    """The 1-minute load average, printed next to every figure: other jobs share this machine."""
    return f"load average {os.getloadavg()[0]:.1f}"


def set_threads(threads: int) -> None:
    """torch's intra-op threads; 0 keeps torch's own choice (on an oversubscribed 2-core box
    1 thread can be far faster than torch's pool)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
