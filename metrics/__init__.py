"""Pure statistics of every study kind: plain functions over plain sequences, importing numpy and
scipy, never Django or another BiasLab app. Undefined figures are None, never 0."""
