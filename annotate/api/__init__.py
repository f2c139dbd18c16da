"""REST API of the human side: one small view per action, explicit serializers, and the OpenAPI
description of each (drf-spectacular reads the ``extend_schema`` next to every method).

The labelled unit is an item; a label is one annotator's answer to one question about it.
Object-level rules: an annotator only ever reaches their own labels and the items they hold a
seat on; everything else answers 404 (it does not exist for them). Researcher-only endpoints
answer 403 to annotators and outsiders. A method an endpoint lacks is 405 for everyone
(``config.api``); every error is the JSON ``Error`` shape.

One module per resource: ``studies``, ``labeling``, ``items``, ``disputes``, ``results``
(agreement, ground truth); ``common`` holds what they share, ``links`` the schema's links.
"""
