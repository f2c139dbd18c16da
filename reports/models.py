"""Reports own no tables: they read labels and predictions through selectors."""
