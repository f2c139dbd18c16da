"""The ``attributes`` protocol (GEP, Zhang et al. 2023): 15 clothing attributes asked yes or no,
compared between images of women and men. See docs/explanation/protocols.md."""
