"""Experiment runners, metrics and reports above the learners (DESIGN.md): today the recourse audit."""
