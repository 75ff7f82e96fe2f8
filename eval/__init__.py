"""Evaluation dataset, metrics and the harness that runs the dataset through the public gateway."""
