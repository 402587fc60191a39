"""olmOCR's Muon (``optim: muon``): Keller Jordan's ``SingleDeviceMuonWithAuxAdam`` over the hidden matrices at
``learning_rate`` with ``muon_momentum``, and Adam over the head, the embeddings and the 1-D parameters at
``learning_rate`` times its multipliers, as honing's ``optim.muon_*`` keys (``honing.optim.muon_groups``)."""

from __future__ import annotations

from honing.interop.configs.translation import Keys, Translation

# olmOCR's TrainingConfig defaults, which its Muon uses whether or not the file sets them
MULTIPLIERS = {"muon_lr_multiplier_head": 11.0, "muon_lr_multiplier_embed": 30.0, "muon_lr_multiplier_scalar": 2.0}
MOMENTUM = 0.95


def translate_muon(t: Translation, training: Keys, optimizer: str) -> None:
    """The Muon keys of olmOCR's ``training`` section; noted as unused under another optimizer."""
    if optimizer.strip().lower() != "muon":
        for key in ("muon_momentum", *MULTIPLIERS):
            training.note(key, f"unused by {optimizer}")
        return
    # Keller Jordan's update scales a matrix by sqrt(max(1, rows / cols)): torch's "original" adjustment
    t.set("optim.muon_adjust_lr", "original")
    momentum = training.number("muon_momentum", float)
    if momentum is None:
        t.default("optim.momentum", MOMENTUM, "olmOCR's TrainingConfig.muon_momentum")
    else:
        t.set("optim.momentum", momentum)
    for key, default in MULTIPLIERS.items():
        value = training.number(key, float)
        if value is None:
            t.default(f"optim.{key}", default, f"olmOCR's TrainingConfig.{key}")
        else:
            t.set(f"optim.{key}", value)
