"""The progress meter and stop flag of long commands; they live in ``studies.progress`` so the
core's imports (``import_images``) can show the same line. Re-exported here for the detectors."""

from __future__ import annotations

from studies.progress import Progress, StageProgress, StopFlag, command_stream, format_duration

__all__ = ["Progress", "StageProgress", "StopFlag", "command_stream", "format_duration"]
