"""The workers of ``generate_images`` and ``edit_images`` on an executor (``--executor ray``): a diffusers
pipeline held for the worker's lifetime, on plain data in and out. No Django here."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from generation.edit_pipeline import (
    EditSettings,
    SeedEditor,
    editor_info,
    editor_load,
    input_size,
    settings_check,
)
from generation.generation import (
    Generated,
    ModelSource,
    Settings,
    images_generate,
    pipeline_info,
    pipeline_load,
)


class _PipelineWorker:
    """A diffusers pipeline held for the worker's lifetime (``pipe``: one loaded already)."""

    def __init__(self, *, model: dict[str, str], settings: dict[str, Any], pipe: Any = None) -> None:
        self.model = model
        self.settings = settings
        self.pipe = pipe
        self.editor: Any = None

    def prepare(self, payload: Any) -> Any:
        return payload


class GenerationWorker(_PipelineWorker):
    """Payload: a ``generation.generation.Job``; output: its ``Generated``."""

    def load(self) -> dict[str, Any]:
        """Load the pipeline (GenerationError names the weights variable) → its effective settings."""
        settings = Settings(**self.settings)
        if self.pipe is None:
            self.pipe = pipeline_load(ModelSource(**self.model), device=settings.device)
        return pipeline_info(self.pipe, settings)

    def run(self, keys: Sequence[Hashable], jobs: Sequence[Any]) -> list[Generated]:
        if self.pipe is None:
            self.load()
        images = images_generate(self.pipe, jobs, Settings(**self.settings))
        return [Generated.of(image) for image in images]


class EditWorker(_PipelineWorker):
    """Payload: a ``generation.edit_pipeline.EditTask``; output: its ``Generated``. Seed photos are decoded in
    ``run``, once per photo for the worker's lifetime."""

    def load(self) -> dict[str, Any]:
        """Load the editor (EditingError names the weights variable, or the setting this kind of
        editor does not take) → what it is and the settings it uses, for the pairs' params."""
        model, settings = ModelSource(**self.model), EditSettings(**self.settings)
        pipe = self.pipe if self.pipe is not None else editor_load(model, device=settings.device)
        settings_check(pipe, settings)
        self.editor = SeedEditor(pipe, settings, input_size(model.name, settings))
        return editor_info(pipe, settings)

    def run(self, keys: Sequence[Hashable], tasks: Sequence[Any]) -> list[Any]:
        if self.editor is None:
            self.load()
        return self.editor.edit(tasks)
