"""Links between operations of the OpenAPI description (a drf-spectacular post-processing hook)."""

from __future__ import annotations

from typing import Any

#: (operation, status) → {link name: link}: from one answer to the next request (schemathesis too).
LINKS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("studies_list", "200"): {
        "NextItem": {"operationId": "next_item", "parameters": {"slug": "$response.body#/0/slug"}},
        "Questions": {"operationId": "questions_list", "parameters": {"study": "$response.body#/0/slug"}},
    },
    ("next_item", "200"): {
        "SubmitFirstChoice": {
            "operationId": "labels_create",
            "description": "Answer the current item's first question with its first choice.",
            "requestBody": {
                "item": "$response.body#/item/id",
                "question": "$response.body#/item/questions/0/key",
                "value": "$response.body#/item/questions/0/choices/0/value",
            },
        },
    },
    ("labels_create", "201"): {
        "ReadLabel": {"operationId": "labels_retrieve", "parameters": {"id": "$response.body#/id"}},
        "ChangeLabel": {"operationId": "labels_update", "parameters": {"id": "$response.body#/id"}},
        "PatchLabel": {"operationId": "labels_partial_update", "parameters": {"id": "$response.body#/id"}},
    },
    ("labels_list", "200"): {
        "ReadLabel": {"operationId": "labels_retrieve", "parameters": {"id": "$response.body#/results/0/id"}},
    },
    ("disputes_list", "200"): {
        "ReadDispute": {"operationId": "disputes_retrieve", "parameters": {"id": "$response.body#/0/item"}},
        "ResolveWithFirstLabel": {
            "operationId": "disputes_resolve",
            "description": "Settle the first dispute with its first annotator's answer.",
            "parameters": {"id": "$response.body#/0/item"},
            "requestBody": {
                "question": "$response.body#/0/question",
                "value": "$response.body#/0/labels/0/value",
            },
        },
    },
    ("items_list", "200"): {
        "ReadItem": {"operationId": "items_retrieve", "parameters": {"id": "$response.body#/results/0/id"}},
    },
}


def schema_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: adds ``LINKS`` to the responses they start from."""
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            for status_code, response in operation.get("responses", {}).items():
                links = LINKS.get((operation.get("operationId"), status_code))
                if links:
                    response["links"] = links
    return result
