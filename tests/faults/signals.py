"""A callback the SIGTERM test loads by import path (``callbacks.custom``) into a real multi-process run."""

from __future__ import annotations

import os
import signal

from honing.distributed import get_rank
from honing.train import Callback


class TermOnRank(Callback):
    """Sends SIGTERM to this process on one rank at the end of one step, as a scheduler stopping one node would."""

    def __init__(self, rank: int, step: int):
        self.rank = rank
        self.term_step = step

    def on_step_end(self) -> None:
        if self.step == self.term_step and get_rank() == self.rank:
            os.kill(os.getpid(), signal.SIGTERM)


class TermBeforeEvaluation(TermOnRank):
    """:class:`TermOnRank` before that step's evaluation runs (a higher priority than the evaluator's): the
    evaluation then starts with one rank asked to stop."""

    priority = 250  # the evaluator's is 200
