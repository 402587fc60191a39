"""Oumi's map data sets by its names (``oumi.core.datasets``, ``oumi.datasets.grpo``, ``oumi.core.registry``):
``BaseMapDataset`` (rows read into a pandas frame, ``dataset[i]`` is ``transform(raw(i))``),
``BaseExperimentalGrpoDataset`` and Oumi's GRPO data sets, whose ``transform`` gives the rows and prompt text
Oumi's own give (the transforms are Oumi's, Apache-2.0, src/oumi/datasets/grpo/), and ``register_dataset``, which
also makes the class a named data set of honing (``data.*.sources[].dataset: NAME``) whose rows are its
``transform``'s. ``conversation(i)`` gives honing's ``Conversation``: Oumi's ``conversation_id`` is kept in its
``metadata``."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from honing.data.example_types import Conversation
from honing.data.named.entry import NamedDataset
from honing.data.named.registry import register_named_dataset
from honing.errors import DataError

__all__ = [
    "REGISTRY",
    "BaseExperimentalGrpoDataset",
    "BaseMapDataset",
    "BerryBenchGrpoDataset",
    "CountdownGrpoDataset",
    "Gsm8kGrpoDataset",
    "LetterCountGrpoDataset",
    "TldrGrpoDataset",
    "register_dataset",
]

#: Oumi's dataset registry: a registered name -> its class (``oumi.core.registry.REGISTRY.get_dataset``)
REGISTRY: dict[str, type] = {}
_PROMPT_KEY = "prompt"
_COMPLETION_KEY = "completion"


def register_dataset(registry_name: str, subset: str | None = None) -> Callable[[type], type]:
    """Oumi's ``@register_dataset``: the class answers to ``registry_name`` in Oumi's registry and, as a named data
    set of honing, in a source's ``dataset: registry_name`` (its rows are its ``transform``'s prompt rows); a name
    that is one of honing's own named data sets is a DataError naming it."""

    def register(cls: type) -> type:
        REGISTRY[registry_name] = cls
        register_named_dataset(
            NamedDataset(
                name=registry_name,
                aliases=(),
                columns=((),),  # the class's transform reads the columns it reads
                gives="prompts",
                build=_transform_rows(cls, registry_name),
                subset=subset,
                description=f"Oumi's {cls.__name__}",
            )
        )
        return cls

    return register


def _oumis_own(name: str) -> Callable[[type], type]:
    """Oumi's registration of its own data sets: in Oumi's registry only, as honing's named data sets already read
    these hub ids (``honing.data.named``; the Oumi config translator names them)."""

    def register(cls: type) -> type:
        REGISTRY[name] = cls
        return cls

    return register


def _transform_rows(cls: type, name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The builder of a registered class: each row (as the pandas ``Series`` Oumi hands ``transform``) through the
    ``transform`` of one instance that holds no rows of its own, made on the first row."""
    made: list[Any] = []

    def build(row: Mapping[str, Any]) -> dict[str, Any]:
        import pandas as pd  # only when rows are read

        if not made:
            instance = cls.__new__(cls)
            instance._rows_given = []  # read by _load_data: the rows come from honing's source
            instance.__init__(dataset_name=name)
            made.append(instance)
        return dict(made[0].transform(pd.Series(dict(row))))

    return build


class BaseMapDataset:
    """Oumi's ``BaseMapDataset``: the rows of ``dataset_path`` (JSON Lines, Parquet, a ``save_to_disk`` folder) or of
    the hub's ``dataset_name`` in a pandas frame; ``dataset[i]`` is ``transform(raw(i))``."""

    dataset_name: str
    dataset_path: str | None = None
    default_dataset: str | None = None
    default_subset: str | None = None

    def __init__(
        self,
        *,
        dataset_name: str | None,
        dataset_path: str | None = None,
        subset: str | None = None,
        split: str | None = None,
        trust_remote_code: bool = False,
        transform_num_workers: str | int | None = None,
        **kwargs: Any,
    ) -> None:
        """Oumi's constructor: unknown keywords are ignored, as Oumi does (it logs them at debug level)."""
        dataset_name = dataset_name or self.default_dataset
        if dataset_name is None:
            raise DataError(
                f"{type(self).__name__}: give dataset_name= or set the class's default_dataset (Oumi's rule)"
            )
        self.dataset_name = dataset_name
        self.dataset_path = dataset_path
        self.dataset_subset = subset or self.default_subset
        self.split = split
        self.trust_remote_code = trust_remote_code
        self.transform_num_workers = transform_num_workers

    def __getitem__(self, idx: int) -> dict:
        """The transformed row at ``idx``."""
        return self.transform(self.raw(idx))

    def __len__(self) -> int:
        """The number of rows."""
        return len(self._data)

    @property
    def data(self) -> Any:
        """The rows' pandas frame."""
        return self._data

    def raw(self, idx: int) -> Any:
        """The row at ``idx`` as read (a pandas ``Series``)."""
        return self._data.iloc[idx]

    def as_generator(self):
        """Every transformed row, in order."""
        for idx in range(len(self)):
            yield self[idx]

    def transform(self, sample: Any) -> dict:
        """A subclass's: the row read → the row trained on."""
        raise NotImplementedError(f"{type(self).__name__} defines no transform(sample)")

    def _load_data(self) -> Any:
        """The rows: honing's source's (a registered class read by honing), ``dataset_path``'s, else the hub's."""
        import pandas as pd

        given = getattr(self, "_rows_given", None)
        if given is not None:
            return pd.DataFrame(given)
        if self.dataset_path:
            return _local_frame(self.dataset_path, self.dataset_name)
        return _hub_frame(self.dataset_name, self.dataset_subset, self.split)


def _local_frame(path: str, name: str) -> Any:
    """Oumi's local formats: a ``.jsonl`` or ``.parquet`` file, or a ``datasets`` ``save_to_disk`` folder."""
    import pandas as pd

    if not os.path.exists(path):
        raise DataError(f"dataset_path {path!r} does not exist: give the path of a .jsonl or .parquet file")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".jsonl" and os.path.isfile(path):
        return pd.read_json(path, lines=True)
    if suffix == ".parquet" and os.path.isfile(path):
        return pd.read_parquet(path)
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "dataset_info.json")):
        import datasets

        return datasets.Dataset.load_from_disk(path).to_pandas()
    raise DataError(f"dataset_path {path!r} of {name!r}: expected a .jsonl or .parquet file or a save_to_disk folder")


def _hub_frame(name: str, subset: str | None, split: str | None) -> Any:
    """The hub data set's split (one split: Oumi's rule) as a pandas frame."""
    import datasets

    found = datasets.load_dataset(path=name, name=subset, split=split)
    if isinstance(found, datasets.DatasetDict):
        if len(found) != 1:
            raise DataError(f"dataset {name!r} has the splits {list(found)}: give split=")
        found = next(iter(found.values()))
    return found.to_pandas()


def _conversation(data: Mapping[str, Any]) -> Conversation:
    """honing's ``Conversation`` from Oumi's dict form (``conversation_id`` kept in ``metadata``)."""
    metadata = dict(data.get("metadata") or {})
    if data.get("conversation_id") is not None:
        metadata["conversation_id"] = data["conversation_id"]
    return Conversation.model_validate({"messages": list(data["messages"]), "metadata": metadata})


class BaseExperimentalGrpoDataset(BaseMapDataset):
    """Oumi's ``BaseExperimentalGrpoDataset``: rows read on construction; by default a ``prompt`` / ``completion``
    string pair, stripped."""

    def __init__(
        self,
        *,
        dataset_name: str | None = None,
        dataset_path: str | None = None,
        split: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Oumi's constructor: reads the rows."""
        super().__init__(dataset_name=dataset_name, dataset_path=dataset_path, split=split, **kwargs)
        self._data = self._load_data()

    @staticmethod
    def _process_text_value(s: str) -> str:
        return s.strip() if s else ""

    def _transform_grpo_example(self, example: Any) -> dict:
        """``prompt`` and ``completion`` strings, checked and stripped (Oumi's ``ValueError``s)."""
        for required_key in (_PROMPT_KEY, _COMPLETION_KEY):
            if required_key not in example:
                raise ValueError(f"Example doesn't contain '{required_key}'. Actual keys: {sorted(example.keys())}")
        prompt = example[_PROMPT_KEY] or ""
        completion = example[_COMPLETION_KEY] or ""
        if not isinstance(prompt, str):
            raise ValueError(f"Example '{_PROMPT_KEY}' must be a string. Actual type: {type(prompt)}")
        if not isinstance(completion, str):
            raise ValueError(f"Example '{_COMPLETION_KEY}' must be a string. Actual type: {type(completion)}")
        return {
            _PROMPT_KEY: self._process_text_value(prompt),
            _COMPLETION_KEY: self._process_text_value(completion),
        }

    def transform(self, sample: Any) -> dict:
        """The row's ``prompt`` / ``completion`` pair."""
        return self._transform_grpo_example(sample)

    def conversation(self, idx: int) -> Conversation:
        """The row at ``idx`` as a conversation."""
        return self.transform_conversation(self.raw(idx))

    def conversations(self) -> list[Conversation]:
        """Every row as a conversation."""
        return [self.conversation(index) for index in range(len(self))]

    def transform_conversation(self, sample: Any) -> Conversation:
        """The prompt as the user's turn, the completion as the assistant's."""
        example = self._transform_grpo_example(sample)
        return _conversation(
            {
                "messages": [
                    {"content": example[_PROMPT_KEY], "role": "user"},
                    {"content": example[_COMPLETION_KEY], "role": "assistant"},
                ]
            }
        )


def _prompt_conversation(row: dict) -> Conversation:
    """Oumi's verl-row conversation: the prompt's message, the other columns as metadata."""
    row = dict(row)
    prompt_message = row.pop("prompt")[0]
    return _conversation({"messages": [prompt_message], "metadata": row})


_COUNTDOWN_TEMPLATE = """A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant first thinks about the reasoning process in the mind and then provides the user with the answer.
User: Using the numbers {nums}, create an equation that equals {target}. You can use basic arithmetic operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. And return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.
Assistant: Let me solve this step by step.
<think>"""  # noqa: E501


@_oumis_own("d1shs0ap/countdown")
class CountdownGrpoDataset(BaseExperimentalGrpoDataset):
    """Oumi's ``CountdownGrpoDataset``: ``{"target": 87, "nums": [79, 8]}`` → TinyZero's prompt as verl's row."""

    default_dataset = "d1shs0ap/countdown"

    def transform(self, sample: Any) -> dict:
        """verl's row: ``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``."""
        target = int(sample["target"])
        nums = [int(num) for num in sample["nums"]]
        return {
            "data_source": "countdown",
            "prompt": [{"role": "user", "content": _COUNTDOWN_TEMPLATE.format(nums=nums, target=target)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": {"target": target, "numbers": nums}},
            "extra_info": {"split": self.split if self.split else ""},
        }

    def transform_conversation(self, sample: Any) -> Conversation:
        """The prompt's message, the rest as metadata."""
        return _prompt_conversation(self.transform(sample))


def _gsm8k_solution(solution_str: str) -> str:
    """The number after ``####`` (commas dropped), as verl's preprocessing extracts it."""
    solution = re.search("#### (\\-?[0-9\\.\\,]+)", solution_str)
    if solution is None:
        raise DataError(f"a GSM8K answer has no '#### N': {solution_str[-80:]!r}")
    return solution.group(0).split("#### ")[1].replace(",", "")


@_oumis_own("openai/gsm8k")
class Gsm8kGrpoDataset(BaseExperimentalGrpoDataset):
    """Oumi's ``Gsm8kGrpoDataset``: ``question`` / ``answer`` → verl's GSM8K row."""

    default_dataset = "openai/gsm8k"

    def transform(self, sample: Any) -> dict:
        """verl's row, the ``#### N`` number as the ground truth."""
        instruction = 'Let\'s think step by step and output the final answer after "####".'
        return {
            "data_source": "gsm8k",
            "prompt": [{"role": "user", "content": f"{sample['question']} {instruction}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": _gsm8k_solution(sample["answer"])},
            "extra_info": {
                "split": self.split if self.split else "",
                "answer": sample["answer"],
                "question": sample["question"],
            },
        }

    def transform_conversation(self, sample: Any) -> Conversation:
        """The prompt's message, the rest as metadata."""
        return _prompt_conversation(self.transform(sample))


_LETTER_COUNT_SYSTEM = (
    "Your final answer should be an integer written as digits and formatted as "
    r'"\boxed{your_answer}". For example, if the answer is 42, '
    r'you should output "\boxed{42}".'
)


@_oumis_own("oumi-ai/oumi-letter-count-clean")
@_oumis_own("oumi-ai/oumi-letter-count")
class LetterCountGrpoDataset(BaseExperimentalGrpoDataset):
    """Oumi's ``LetterCountGrpoDataset``: the question after Oumi's ``\\boxed{}`` system turn, the count as
    ``letter_count`` (the ``count_letters`` reward's column)."""

    default_dataset = "oumi-ai/oumi-letter-count"

    def transform(self, sample: Any) -> dict:
        """``{"prompt": [system, question], "letter_count": N}``."""
        messages = [{"content": _LETTER_COUNT_SYSTEM, "role": "system"}, sample["messages"][0]]
        return {"prompt": messages, "letter_count": sample["metadata"]["letter_count_integer"]}

    def transform_conversation(self, sample: Any) -> Conversation:
        """The row's own conversation with the system turn first."""
        row = dict(sample)
        row["messages"] = [{"content": _LETTER_COUNT_SYSTEM, "role": "system"}, sample["messages"][0]]
        return _conversation(row)


_BERRY_BENCH_SYSTEM = (
    "Your final answer should be formatted as "
    r'```json YOUR_ANSWER```. For example, if the answer is {"a": 1}, '
    r'you should output ```json {"a": 1}}```.'
)


@_oumis_own("oumi-ai/berrybench-v0.1.1")
class BerryBenchGrpoDataset(BaseExperimentalGrpoDataset):
    """Oumi's ``BerryBenchGrpoDataset``: the question after Oumi's JSON-answer system turn, its metadata kept."""

    default_dataset = "oumi-ai/berrybench-v0.1.1"

    def transform(self, sample: Any) -> dict:
        """``{"prompt": [system, question], "metadata": ...}``."""
        messages = [{"content": _BERRY_BENCH_SYSTEM, "role": "system"}, sample["messages"][0]]
        return {"prompt": messages, "metadata": sample["metadata"]}

    def transform_conversation(self, sample: Any) -> Conversation:
        """The row's own conversation with the system turn first."""
        row = dict(sample)
        row["messages"] = [{"content": _BERRY_BENCH_SYSTEM, "role": "system"}, sample["messages"][0]]
        return _conversation(row)


@_oumis_own("trl-lib/tldr")
class TldrGrpoDataset(BaseExperimentalGrpoDataset):
    """Oumi's ``TldrGrpoDataset``: the base class's ``prompt`` / ``completion`` pair."""

    default_dataset = "trl-lib/tldr"
