"""Make torchvision importable next to a CPU-only torch."""

from __future__ import annotations

import importlib.util
import logging
import sys

log = logging.getLogger(__name__)
_done = False
patched = False  # True when the pure-torch NMS is in use (reported by benchmarks)


def _extension_loads() -> bool:
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True  # no torchvision: nothing to patch
    from pathlib import Path

    libs = list(Path(spec.submodule_search_locations[0]).glob("_C*.so"))
    if not libs:
        return False
    try:
        torch.ops.load_library(str(libs[0]))
    except (OSError, RuntimeError):
        return False
    return hasattr(torch.ops.torchvision, "nms")


def _nms_reference(boxes, scores, iou_threshold: float):
    """Greedy NMS in plain torch; same result as torchvision's kernel (kept indices, by score)."""
    import torch

    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    order = scores.argsort(descending=True)
    keep: list[int] = []
    suppressed = torch.zeros(boxes.shape[0], dtype=torch.bool, device=boxes.device)
    for idx in order.tolist():
        if suppressed[idx]:
            continue
        keep.append(idx)
        xx1 = torch.maximum(x1[idx], x1)
        yy1 = torch.maximum(y1[idx], y1)
        xx2 = torch.minimum(x2[idx], x2)
        yy2 = torch.minimum(y2[idx], y2)
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[idx] + areas - inter).clamp(min=1e-12)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64, device=boxes.device)


def ensure_torchvision() -> None:
    global _done, patched
    if _done:
        return
    _done = True
    if "torchvision" in sys.modules or _extension_loads():
        return
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.impl("nms", _nms_reference, "CPU")
    # torchvision registers a fake kernel for the quantized variant unconditionally at import,
    # so the operator has to exist too; quantized boxes are dequantized and go the same way.
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.impl("qnms", lambda d, s, t: _nms_reference(d.dequantize(), s.dequantize(), t), "CPU")
    # Keep the library object alive for the life of the process.
    globals()["_torchvision_lib"] = lib
    # torchvision.ops.nms asks extension._has_ops() at call time: True lets the ops defined above
    # run; any other torchvision C++ op still fails with "operator ... does not exist".
    import torchvision.extension

    torchvision.extension._has_ops = lambda: True
    patched = True
    log.info("torchvision's C++ extension is not loadable here; using a pure-torch NMS.")
