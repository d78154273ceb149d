"""Solvers of the sequential tabular worlds (:mod:`envs.sequential`): the BRKGA sequencer of CSCF
(a heuristic returning a Pareto front) and an exact uniform-cost search on the value grid."""

from solvers.sequential.brkga import BRKGASequencer
from solvers.sequential.exact import ExactSequenceSearch

__all__ = ["BRKGASequencer", "ExactSequenceSearch"]
