"""The sampling stage's PTransforms: seeds, the two placements, the entry point, the writer."""
