"""The libraries' warnings that ``honing`` on the command line keeps out of a run's output: notices about those
libraries' own internals (deprecations inside transformers, torch's device mesh slicing, lm-eval's task set-up) that
a honing user can do nothing about, and that hide honing's own warnings among them (issue 45). Errors still show.

A user who asks for them sees them: ``TRANSFORMERS_VERBOSITY`` and ``LMEVAL_LOG_LEVEL`` are the libraries' own
settings and win, and ``-W`` / ``PYTHONWARNINGS`` leave Python's warning filters as the user set them.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

#: loggers whose warnings are hidden (their errors still show); torch's pytree logs a deprecation notice for each enum
#: that torchao (imported by peft and transformers whenever it is installed) registers; bitsandbytes, which peft
#: imports whenever it is installed, says on AVX-512 BF16 CPUs that a 4-bit kernel of its own could not be fetched,
#: and honing runs none of its kernels (4-bit weights are torchao's)
QUIET_LOGGERS = ("transformers", "torch.distributed.device_mesh", "lm_eval", "torch.utils._pytree", "bitsandbytes")

#: modules whose Python warnings (``warnings.warn``) are hidden: regular expressions over the module's name
QUIET_WARNING_MODULES = (r"transformers(\.|$)", r"torch\.distributed\.device_mesh$", r"lm_eval(\.|$)")


def quiet_library_warnings() -> None:
    """Hide the warnings of ``QUIET_LOGGERS`` and ``QUIET_WARNING_MODULES``, unless the user set their own level."""
    # transformers sets its loggers' level from this variable when it is imported, over any level set before
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for name in QUIET_LOGGERS:
        if not (name == "lm_eval" and os.environ.get("LMEVAL_LOG_LEVEL")):
            logging.getLogger(name).setLevel(logging.ERROR)
    if sys.warnoptions:  # -W or PYTHONWARNINGS: the user's filters stand
        return
    for module in QUIET_WARNING_MODULES:
        warnings.filterwarnings("ignore", module=module)
