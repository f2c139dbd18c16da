"""The ``objects`` protocol (object co-occurrence, Mannering 2023): which objects a detector
finds beside men and beside women, with people checking its boxes."""
