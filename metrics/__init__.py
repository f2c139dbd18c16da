"""Pure statistics of every study kind: plain functions over plain sequences.

This package is the leaf of the dependency graph: it imports numpy and scipy, never Django and
never another BiasLab app, so ``annotate``, ``detectors`` and ``reports`` can all use it and its
tests need no database. Each function returns small frozen dataclasses (or plain numbers) and
states what it does with empty and degenerate input: an undefined figure is ``None``, never 0.
"""
