"""The dependency arrows point down (STYLE.md, issue 8): metrics imports nothing of the project or
of Django, studies only metrics, annotate and detectors only the core beside config, and nobody
below reports imports it. Read from the source with ``ast`` (imports inside functions count:
a lazy import is still an arrow), so a new module that breaks a layer fails here at once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top-level packages of this repository (anything else is the standard library or a dependency).
PROJECT = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests")

# Which project packages each package may import (itself always). A package not named here is
# above the core and may import what it likes; the rows below are whitelists, so a new app is
# automatically out of bounds for them.
ALLOWED = {
    "metrics": set(),
    "studies": {"metrics"},
    "accounts": set(),
    "annotate": {"studies", "metrics", "config"},
    "detectors": {"studies", "metrics", "config"},
}
NO_DJANGO = {"metrics"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_layers_are_found():
    assert {"metrics", "studies", "annotate", "detectors", "reports", "config"} <= set(PROJECT)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below_it(package):
    allowed = ALLOWED[package] | {package}
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        roots = imported_roots(path)
        for root in sorted(roots & set(PROJECT) - allowed):
            wrong.append(f"{path.relative_to(ROOT)} imports {root}")
        if package in NO_DJANGO:
            wrong.extend(
                f"{path.relative_to(ROOT)} imports {root}"
                for root in sorted(roots & {"django", "rest_framework"})
            )
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_a_lazy_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from reports.render import x\n    import django.db\n", encoding="utf-8")
    assert imported_roots(module) == {"reports", "django"}
