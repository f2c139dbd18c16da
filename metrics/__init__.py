"""Pure statistics of every study kind: plain functions over plain sequences, never importing Django."""
