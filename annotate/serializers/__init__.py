"""Explicit input and output serializers of the annotate API, one set per action.

The labelled unit is an *item* (one image, or a seed/edit pair); a label is one annotator's
answer to one question about one item. Keys of the one-image era that still make sense are kept
beside the new ones (``image`` = the item id, ``url``/``width``/``height`` = the item's main
image, ``label_set`` = the choices of a single-question study, ``final_label`` = the final
answer of a single-question item), so scripts written against them keep working.

Every response goes through its output serializer, so the OpenAPI schema drf-spectacular builds
from these classes is the shape clients get. Inputs are ``config.api.StrictInput`` (JSON types
exactly, unknown fields refused) and ``config.api.QueryInput`` (query parameters).

One module per resource: ``studies`` (what every part shares), ``items``, ``labeling``,
``disputes``, ``results`` (agreement and ground truth).
"""
