"""Whether a command goes to the Hugging Face Hub at all: offline (``HF_HUB_OFFLINE``, set in this process and for
its children) when everything it reads is local or already cached, or when the hub does not answer one short request;
online only when it must fetch and the hub answers.

Without this, huggingface_hub retries an unreachable hub five times per file with backoff (30-60 s and a warning
pair per retry) before transformers falls back to the cache, even for a local folder's tokenizer template or a
preset that carries its model's shape. A user's own ``HF_HUB_OFFLINE`` (``0`` included) is always left as it is."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from honing.hub import hub_offline, is_hub_id

log = logging.getLogger(__name__)

#: how long the one request that asks whether the hub is reachable may take (a DNS lookup included)
PROBE_SECONDS = 3.0
#: the environment variables through which a user decides offline mode themselves
USER_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclass(frozen=True)
class HubNeed:
    """A model or data set a command reads (``key``: the config key or argument naming it), and the one file whose
    presence in the local hub cache is enough for the command (None: a cached file is not enough, e.g. weights);
    ``always``: what ``name`` leads to may be on the hub whatever it is (lm-eval tasks' data sets, ``hf://`` URLs)."""

    key: str
    name: str
    enough_cached: str | None = None
    always: bool = False


def remote(need: HubNeed) -> bool:
    """True when ``need`` may have to come from the hub: it names the hub (not a local folder or file) and its
    ``enough_cached`` file is not cached, or it is ``always`` so."""
    if need.always:
        return True
    if os.path.exists(need.name) or not is_hub_id(need.name):
        return False
    if need.enough_cached is None:
        return True
    from huggingface_hub import try_to_load_from_cache

    return not isinstance(try_to_load_from_cache(need.name, need.enough_cached), str)


def hub_answers(timeout: float = PROBE_SECONDS) -> bool:
    """True when the hub's endpoint answers one HEAD request (any status) within ``timeout`` seconds, through the
    session huggingface_hub itself uses (its proxies and certificates). A thread bounds the DNS lookup too, which
    no socket timeout covers."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    answered = threading.Event()

    def probe() -> None:
        try:
            get_session().head(constants.ENDPOINT, timeout=timeout, follow_redirects=False)
            answered.set()
        except Exception:  # any failure to get an answer means: not reachable from here, now
            pass

    thread = threading.Thread(target=probe, name="honing-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return answered.is_set()


@contextmanager
def offline_mode() -> Iterator[None]:
    """huggingface_hub (and transformers and datasets, which ask it) offline inside the block, in this process and
    the processes it starts; as before afterwards."""
    from huggingface_hub import constants

    saved_constant, saved_env = constants.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")
    constants.HF_HUB_OFFLINE = True  # read once at import; transformers and the hub's HTTP hook ask it each call
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved_constant
        if saved_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved_env


@contextmanager
def hub_access(needs: Iterable[HubNeed], probe_seconds: float = PROBE_SECONDS) -> Iterator[bool]:
    """Run the block offline unless one of ``needs`` must come from the hub and the hub answers; yields whether the
    block runs offline. A user's ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` decides instead, when set."""
    if any(switch in os.environ for switch in USER_SWITCHES):
        yield hub_offline()
        return
    fetched = [need for need in needs if remote(need)]
    if fetched and hub_answers(probe_seconds):
        yield False
        return
    if fetched:
        names = ", ".join(f"{need.key}={need.name}" for need in fetched)
        log.info(
            "the Hugging Face Hub cannot be reached from here (one request, %g s timeout): reading %s from the local "
            "cache only (HF_HUB_OFFLINE=1)",
            probe_seconds,
            names,
        )
    with offline_mode():
        yield True
