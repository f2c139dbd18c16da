"""Where the browser tests save their named screenshots (``labeling.png``, ``dashboard-heatmap.png``…).

``BIASLAB_SCREENSHOTS`` names the folder; the docs build shows the screenshots it finds there in
the tutorials (docs/_hooks/reference.py), so the pictures are of the screens as the tests drove
them. Without it they go to a temporary folder, never into the repository.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ENV = "BIASLAB_SCREENSHOTS"


def screenshots_dir() -> Path:
    given = os.environ.get(ENV, "").strip()
    path = Path(given) if given else Path(tempfile.gettempdir()) / "biaslab-screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
