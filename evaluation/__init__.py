"""Experiment runners, metrics and reports: the layer above ``learners`` and below ``serving``
and the scripts (docs/architecture.md).

- runners, one per world family: :mod:`~evaluation.experiment` (capability / set-cover worlds,
  config in :mod:`~evaluation.config`), :mod:`~evaluation.tabular_experiment` (real data, MACE
  labels), :mod:`~evaluation.sequential_experiment` (CSCF worlds, sequencer labels);
- metrics: :mod:`~evaluation.metrics` (action sets against the exact labels: accuracy, validity,
  regret, ceilings), :mod:`~evaluation.counterfactual_metrics` (point counterfactuals: distance,
  sparsity, diversity, coverage), :mod:`~evaluation.policy_eval` (policies against the exact optimum),
  :mod:`~evaluation.verified` (verified top-k decoding);
- reports: :mod:`~evaluation.report` (report.md and plots of a capability run), the recourse audit
  (:mod:`~evaluation.audit`, :mod:`~evaluation.audit_report`).
"""
