"""The test suite's settings: the project's own, in development mode.

pytest-django imports this module (pyproject's ``DJANGO_SETTINGS_MODULE``) before any conftest
runs, so this is the one place that can choose the mode before ``config.settings`` reads the
environment. Development mode, forced: the suite needs no real secret, and a production
variable exported in the developer's shell (``DJANGO_DEBUG=0``) must not turn on HTTPS
redirects under the test client. Child processes (``manage.py`` in a subprocess) inherit it;
tests of production mode pass their own environment.
"""

from __future__ import annotations

import os

os.environ["DJANGO_DEBUG"] = "1"

from config.settings import *  # noqa: F403
