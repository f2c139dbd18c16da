"""Input and output serializers of the annotate API, one module per resource."""
