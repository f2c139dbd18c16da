"""Where the browser tests save their screenshots: never inside the repository.

``BIASLAB_SCREENSHOTS=/some/dir`` keeps them (the docs' tutorials pick them up from there);
otherwise they go to a temporary folder of this test process, made on first use.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path


@cache
def screenshot_dir() -> Path:
    chosen = os.environ.get("BIASLAB_SCREENSHOTS")
    folder = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="biaslab-screenshots-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
