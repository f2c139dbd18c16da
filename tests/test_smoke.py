from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings

PROBE = """
import os, sys, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.core.management import call_command
from django.urls import get_resolver
call_command("check")
get_resolver().url_patterns  # import every urls module, hence every view module
heavy = [m for m in ("torch", "dlib", "ultralytics", "transformers", "diffusers", "cv2") if m in sys.modules]
print("HEAVY=" + ",".join(heavy))
"""


@pytest.mark.subprocess
def test_django_starts_without_loading_heavy_ml_libraries():
    # Detectors are imported lazily: start-up, `check` and URL loading must not import torch,
    # dlib or ultralytics (seconds of start-up and GBs of memory for every web worker).
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    )
    assert "HEAVY=\n" in result.stdout, result.stdout


@pytest.mark.django_db
def test_healthz_answers_with_the_database_vendor(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["ok"] is True


@pytest.mark.django_db
def test_login_page_renders_for_anonymous_visitors(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b"Log in" in response.content


@pytest.mark.django_db
def test_image_files_are_served_to_logged_in_users_only(client, client_for, researcher, settings):
    (settings.MEDIA_ROOT / "images").mkdir()
    (settings.MEDIA_ROOT / "images" / "x.png").write_bytes(b"png-bytes")
    assert client.get("/media/images/x.png").status_code == 302  # to the login page
    response = client_for(researcher).get("/media/images/x.png")  # who else: tests/config/test_media.py
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"png-bytes"
