"""Input and output serializers of the annotate API, one module per resource; the OpenAPI schema is
built from them."""
