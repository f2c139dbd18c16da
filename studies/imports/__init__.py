"""One import pipeline for every file that comes into BiasLab (images, labels, ground truth,
predictions): CSV rows with their numbers and the rows refused (``rows``), the loop that checks,
keeps, writes and records a run (``pipeline``)."""

from studies.imports.pipeline import Importer, Spill, actor_name, import_run
from studies.imports.rows import ImportSummary, ItemUpdate, RejectedRow, csv_header, csv_rows_stream

__all__ = [
    "ImportSummary",
    "Importer",
    "ItemUpdate",
    "RejectedRow",
    "Spill",
    "actor_name",
    "csv_header",
    "csv_rows_stream",
    "import_run",
]
