"""System checks (``manage.py check``) of every protocol registration and its spec's dotted
paths, resolved without importing their modules, and of every question kind registration."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.utils.module_loading import import_string

from studies.kinds import NAME_MAX, QuestionKind, kind_registrations
from studies.protocols import ProtocolSpec, protocol_registrations

#: The spec fields that name a module (the rest name an attribute of a module).
MODULE_FIELDS = {"urls": "urlpatterns", "estimates": "ESTIMAND"}
ATTRIBUTE_FIELDS = ("demo", "analysis")


def _top_level_names(tree: ast.Module) -> set[str] | None:
    """Names a module binds at its top level; None when it cannot be known (``import *``, a
    module ``__getattr__``)."""
    names: set[str] = set()
    statements: list[ast.stmt] = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With):
            statements.extend(node.body)
            statements.extend(getattr(node, "orelse", []))
            statements.extend(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                statements.extend(handler.body)
    return None if "__getattr__" in names else names


def dotted_path_problem(path: str, *, module: bool = False, attribute: str = "") -> str | None:
    """Why ``path`` names nothing, or None; ``module``: the path is a module (defining
    ``attribute`` when given). Nothing is imported but parents."""
    if not path:
        return "the path is empty"
    module_name, _, name = (path, "", attribute) if module else path.rpartition(".")
    if not module_name:
        return f"{path!r} is not a dotted path"
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as error:
        return f"module {module_name!r} cannot be found ({error})"
    if found is None:
        return f"no module {module_name!r}"
    if not name or found.origin is None or not found.origin.endswith(".py"):
        return None
    try:
        with open(found.origin, encoding="utf-8") as source:
            names = _top_level_names(ast.parse(source.read(), found.origin))
    except SyntaxError as error:
        return f"module {module_name!r} does not parse ({error.msg}, line {error.lineno})"
    if names is not None and name not in names:
        return f"module {module_name!r} defines no {name!r}"
    return None


def _spec_problems(key: str, spec: ProtocolSpec) -> Iterator[CheckMessage]:
    for field_name in (*MODULE_FIELDS, *ATTRIBUTE_FIELDS):
        path = getattr(spec, field_name)
        attribute = MODULE_FIELDS.get(field_name, "")
        problem = path and dotted_path_problem(path, module=field_name in MODULE_FIELDS, attribute=attribute)
        if problem:
            yield Error(
                f"Protocol {key!r}: its spec's {field_name} = {path!r}: {problem}.", id="protocols.E003"
            )
    for field_name in ("kind_validators", "kind_checks"):
        for kind, path in getattr(spec, field_name).items():
            problem = dotted_path_problem(path)
            if problem:
                yield Error(
                    f"Protocol {key!r}: its spec's {field_name}[{kind!r}] = {path!r}: {problem}.",
                    id="protocols.E004",
                )
    for kind in spec.kind_checks:
        if kind not in spec.kind_validators:
            yield Error(
                f"Protocol {key!r}: its spec checks output kind {kind!r} (kind_checks) but does not "
                "validate it (kind_validators).",
                id="protocols.E005",
            )


@register("protocols")
def check_protocols(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every registered protocol's spec imports, matches its key, and names only existing paths."""
    errors: list[CheckMessage] = []
    for key, entry in protocol_registrations().items():
        try:
            spec = import_string(entry) if isinstance(entry, str) else entry
        except Exception as error:  # whatever the import raises is the finding
            errors.append(
                Error(
                    f"Protocol {key!r}: its spec {entry!r} cannot be imported: {error!r}.",
                    hint="protocol_spec on the app's AppConfig is the dotted path of a ProtocolSpec.",
                    id="protocols.E001",
                )
            )
            continue
        if not isinstance(spec, ProtocolSpec) or spec.key != key:
            errors.append(
                Error(
                    f"Protocol {key!r}: {entry!r} is not a ProtocolSpec with key {key!r}.",
                    hint="The spec's key is the label of the app that registers it.",
                    id="protocols.E002",
                )
            )
            continue
        errors.extend(_spec_problems(key, spec))
    return errors


def _kind_problems(who: str, kind: QuestionKind) -> Iterator[CheckMessage]:
    from django.contrib.staticfiles import finders
    from django.template import TemplateDoesNotExist
    from django.template.loader import get_template

    try:
        get_template(kind.template)
    except TemplateDoesNotExist:
        yield Error(
            f"Question kind {kind.name!r} ({who}): its template {kind.template!r} does not exist.",
            id="studies.E012",
        )
    for attribute in ("script", "stylesheet"):
        path = getattr(kind, attribute)
        if path and not finders.find(path):
            yield Error(
                f"Question kind {kind.name!r} ({who}): its {attribute} {path!r} is no static file.",
                id="studies.E013",
            )


@register("kinds")
def check_kinds(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every registered question kind: it imports, is a named ``QuestionKind``, its name is its
    own, and its template and static files exist."""
    errors: list[CheckMessage] = []
    seen: dict[str, str] = {}
    for who, entry in kind_registrations():
        try:
            kind = import_string(entry) if isinstance(entry, str) else entry
        except Exception as error:  # whatever the import raises is the finding
            errors.append(
                Error(
                    f"Question kind {entry!r} ({who}) cannot be imported: {error!r}.",
                    hint="question_kinds on the app's AppConfig lists dotted paths of QuestionKind instances.",
                    id="studies.E010",
                )
            )
            continue
        if not isinstance(kind, QuestionKind) or not 0 < len(kind.name) <= NAME_MAX:
            errors.append(
                Error(
                    f"{entry!r} ({who}) is not a QuestionKind with a name of 1 to {NAME_MAX} characters.",
                    id="studies.E011",
                )
            )
            continue
        if kind.name in seen:
            errors.append(
                Error(
                    f"Question kind {kind.name!r} is registered twice ({seen[kind.name]} and {who}).",
                    id="studies.E014",
                )
            )
            continue
        seen[kind.name] = who
        errors.extend(_kind_problems(who, kind))
    return errors
