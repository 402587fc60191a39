"""Math answers checked by Hugging Face's math-verify (``pip install 'honing[eval]'``): the completion's final
answer against the ``answer`` column's, compared as mathematical expressions (``1/2`` equals ``0.5``)."""

from __future__ import annotations

from collections.abc import Sequence

from honing.errors import ConfigError
from honing.rl.builtin_rewards import ChatOrText, completion_text

#: GSM8K writes its gold answer after this marker, below the worked solution
GSM8K_MARKER = "####"


def gold_text(answer: object) -> str:
    """The gold answer to parse: what follows GSM8K's ``####`` when present, else the whole answer."""
    text = str(answer)
    return text.rsplit(GSM8K_MARKER, 1)[-1].strip() if GSM8K_MARKER in text else text.strip()


def math_verify(
    prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], answer: Sequence[object], **_: object
) -> list[float | None]:
    """1.0 when math-verify finds the completion's answer equal to the ``answer`` column's, else 0.0; None when the
    gold answer holds nothing math-verify can parse (the reward does not apply)."""
    try:
        from math_verify import parse, verify
    except ImportError as error:
        raise ConfigError(f"reward 'math_verify' needs math-verify ({error}); pip install 'honing[eval]'") from None
    scores: list[float | None] = []
    for completion, gold in zip(completions, answer):
        parsed_gold = parse(gold_text(gold))
        if not parsed_gold:
            scores.append(None)
            continue
        scores.append(float(verify(parsed_gold, parse(completion_text(completion)))))
    return scores
