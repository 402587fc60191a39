"""Muon for the hidden layers' weight matrices and AdamW for everything else, as one torch optimizer.

torch.optim.Muon takes only 2-D parameters; embeddings, the output head, norms, biases and any other shape
need another optimizer (Keller Jordan's recipe: AdamW). Two optimizers would break what the rest of honing
assumes of one (one ``param_groups`` list the LR schedule walks, one state dict for checkpoints), so this class
owns every group and all the state and lends them to a torch Muon and a torch AdamW at each step: the updates are
torch's own, and the state checkpoints and resumes like any single optimizer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: the group key that says which half a parameter group belongs to
USE_MUON = "use_muon"


class MuonWithAdamW(torch.optim.Optimizer):
    """Groups with ``use_muon`` True are stepped by torch.optim.Muon, the others by torch.optim.AdamW."""

    def __init__(
        self,
        groups: list[dict[str, Any]],
        *,
        lr: float,
        weight_decay: float,
        momentum: float,
        betas: tuple[float, float],
        eps: float,
        fused: bool | None,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr: str = "match_rms_adamw",
    ):
        muon_groups = [group for group in groups if group[USE_MUON]]
        adamw_groups = [group for group in groups if not group[USE_MUON]]
        if not muon_groups:
            raise ValueError("muon: the model has no trainable 2-D weight matrix outside the embeddings and head")
        # Moonshot's scaling ("match_rms_adamw", the default) gives Muon's updates AdamW's size, so optim.lr serves
        # both halves; "original" is Keller Jordan's sqrt(max(1, rows / cols)), which olmOCR's Muon uses
        self._muon = torch.optim.Muon(
            muon_groups,
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            adjust_lr_fn=adjust_lr,
        )
        self._adamw = (
            torch.optim.AdamW(adamw_groups, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, fused=fused)
            if adamw_groups
            else None
        )
        # the children filled in their defaults; these same group dicts become this optimizer's groups
        super().__init__(self._muon.param_groups + (self._adamw.param_groups if self._adamw else []), {})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One Muon step for the matrices and one AdamW step for the rest."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # load_state_dict replaces this optimizer's groups and state: hand the current ones to the children
        self._muon.param_groups = [group for group in self.param_groups if group[USE_MUON]]
        self._muon.state = self.state
        self._muon.step()
        if self._adamw is not None:
            self._adamw.param_groups = [group for group in self.param_groups if not group[USE_MUON]]
            self._adamw.state = self.state
            self._adamw.step()
        return loss
