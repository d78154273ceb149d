"""The proposer's hyperparameters (``learners/tabular/proposer.py``; issue 56): one dataclass, each field with its
default and a one-line doc, checked on construction so that a bad value names its field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from learners.tabular.setting import SETTINGS

Proposals = Literal["network", "averages", "neighbours"]
# where a student's picks go: round one's corner grid, round two (``budget_search``'s ``next_picks``: the rows of an
# agent round one left with nothing accepted, and the next picks nearer than the others' answers), or both
STUDENT_USES = ("round_one", "round_two", "both")


@dataclass
class ProposerParams:
    """Hyperparameters of the proposer and of its budgeted black-box search."""

    heads: int = 12  # K: proposals per agent from one forward pass
    neighbours: int = 8  # and this many nearest training agents' changes after them (0: none; "neighbours": heads; the network first)
    set_names: int = 3  # label sets a classifier of the agent ranks likeliest, proposed before the heads ("network" only; 0: none)
    set_donors: int = 3  # of each named set, this many nearest training agents whose labels change it, their values set
    proposals: Proposals = "network"  # network (the method) | averages | neighbours (the baselines, no network)
    calls: int = 2  # round trips to the model per answer (the budget's R)
    rows: int = 256  # rows scored per answer (the budget's N)
    vocabulary: bool = True  # snap numeric changes to the values the labels move each column to
    hidden: tuple[int, ...] = (256, 256)  # network MLP widths
    max_epochs: int = 150  # imitation epochs
    batch_size: int = 128  # training batch size
    lr: float = 3e-3  # peak learning rate (one-cycle)
    dropout: float = 0.0  # dropout after each hidden layer
    spread: float = 0.05  # weight of the mean head loss beside the winner's (keeps every head learning)
    min_change: float = 0.02  # a predicted change below this share of the column's span is read as none
    expert_rounds: int = 0  # rounds of improvement on the model's reward (0: imitation only)
    expert_agents: int = 1000  # agents drawn around the training agents per round (answered with model calls only)
    expert_calls: int = 6  # the search's round trips per agent while improving
    expert_rows: int = 2000  # and its rows per agent
    expert_epochs: int = 60  # training epochs after each round
    surrogate: bool = False  # learn the model's logit near the boundary from its own answers; it chooses the rows asked
    surrogate_queries: int = 600  # rows per training label the model scores for the surrogate (fit time, counted)
    surrogate_hidden: tuple[int, ...] = (64, 64)  # the surrogate's MLP widths
    surrogate_members: int = 1  # surrogate networks fitted with successive seeds and averaged (the fit's seed matters less)
    surrogate_epochs: int = 60  # its training epochs
    surrogate_search: int = 3  # answers per agent of the white-box search (change_value) on the surrogate, proposed first (0: none)
    surrogate_piece_lp: bool = True  # fitting: the surrogate's white-box search also solves each answer's piece MILP for the refit rounds (False: German MLP .93 -> .88 at 2 x 256)
    answer_piece_lp: bool = False  # answering: and for the answers' first proposals (True: 5-20 ms more an answer, the same optimal share on German and Credit MLP)
    surrogate_rounds: int = 1  # rounds asking the model about the search's answers on the surrogate for the training agents, refitting it
    surrogate_max_sigma: float = 0.15  # the surrogate is used only where its held-out logit error near the boundary is at most this
    first_share: float = 0.5  # of an answer's rows, the share round one (the proposals) takes when more rounds follow
    corner_grid: float = 0.25  # of round one's rows, the proposals' changed sets on the vocabulary's values, where the model answers in steps (probed at fit time; 0: never)
    student_agents: int = 0  # where the model answers in steps: agents drawn around the training agents whose corners it answers at fit time, for a student of it (0: none)
    student_corners: int = 200  # vocabulary corners per drawn agent the model answers for the student (fit time, counted)
    student_members: int = 1  # students on independent draws, a corner picked where any accepts it (fit time: as many times the rows)
    student_threshold: float = 0.3  # the student's P(accept) over which a corner is picked (answering: lower, more picks, fewer accepted)
    student_near_picks: int = 64  # with student_use "round_two" or "both": round two's picks per agent nearer than its answer, at most
    student_rows: int = 24  # of round one's corner grid, rows for the student's likeliest accepted corners (nearest first)
    student_pool: int = 10000  # nearest corners per agent the student scores when answering, nearest first in stages (more: nearer picks, more ms for agents whose picks lie far)
    student_distinct: bool = False  # of them, only corners the student tells apart (one value between two of its splits; an option: Credit forest +1 point, German -1 agent of 36)
    student_use: str = "round_one"  # where the student's picks go: "round_one", "round_two" (the agents round one left without an answer, and those nearer than the others' answers), "both"
    student_memory: str = ""  # a directory keeping the model's answers for the student (this model's only): a fit run again asks only what it lacks
    self_labels: int = 0  # of ``labels.unlabelled``, this many answered at fit time by the search itself through the model, the accepted joining the labels (0: none; ``self_labels.py``)
    self_label_calls: int = 8  # the round trips of that search per agent
    self_label_rows: int = 2000  # and its rows per agent
    self_label_workers: int = 2  # processes answering the self-labels' blocks
    self_label_memory: str = ""  # a directory keeping the self-labels' blocks (this model's only): a fit run again answers only what it lacks
    self_label_values: bool = False  # the search's value vocabulary also takes the values the self-labels move a column to (the student keeps the labels' own, which it was fitted on)
    setting: str = "manual"  # "auto": the fit chooses surrogate, student and self-labels from the model's answers (``setting.py``); "manual": as set here

    def __post_init__(self) -> None:
        for name in ("heads", "calls", "rows", "max_epochs", "batch_size", "expert_agents", "expert_calls",
                     "expert_rows", "expert_epochs", "surrogate_queries", "surrogate_epochs", "surrogate_members",
                     "student_pool", "student_members", "self_label_calls", "self_label_rows", "self_label_workers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        if not 0.0 < float(self.first_share) < 1.0:
            raise ValueError(f"first_share: a share of the rows in (0, 1), got {self.first_share!r}")
        if not 0.0 <= float(self.corner_grid) < 1.0:
            raise ValueError(f"corner_grid: a share of round one in [0, 1), got {self.corner_grid!r}")
        if not 0.0 < float(self.student_threshold) < 1.0:
            raise ValueError(f"student_threshold: a probability in (0, 1), got {self.student_threshold!r}")
        if int(self.student_corners) < 1:
            raise ValueError(f"student_corners: must be >= 1, got {self.student_corners!r}")
        for name in ("set_names", "set_donors", "student_agents", "student_rows", "student_near_picks", "self_labels"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        if int(self.surrogate_rounds) < 0:
            raise ValueError(f"surrogate_rounds: must be >= 0, got {self.surrogate_rounds!r}")
        if int(self.expert_rounds) < 0:
            raise ValueError(f"expert_rounds: must be >= 0, got {self.expert_rounds!r}")
        if self.student_use not in STUDENT_USES:
            raise ValueError(f"student_use: expected one of {', '.join(STUDENT_USES)}, got {self.student_use!r}")
        if self.setting not in SETTINGS:
            raise ValueError(f"setting: expected one of {', '.join(SETTINGS)}, got {self.setting!r}")
        if self.proposals not in get_args(Proposals):
            raise ValueError(f"proposals: expected one of {', '.join(get_args(Proposals))}, got {self.proposals!r}")
        if self.setting == "auto" and self.proposals != "network":  # the baselines are the search without learned parts
            raise ValueError(f"setting: 'auto' adds learned parts, and proposals {self.proposals!r} is a baseline without them")
        self.hidden = tuple(int(h) for h in self.hidden)
        self.surrogate_hidden = tuple(int(h) for h in self.surrogate_hidden)
