import pytest

from honing.errors import ConfigError
from honing.models.loading import count_parameters
from honing.train.duration import Duration, DurationUnit
from tests.helpers import tiny_llama


@pytest.mark.parametrize(
    "text, value, unit",
    [
        ("200steps", 200, DurationUnit.steps),
        ("1step", 1, DurationUnit.steps),
        ("2epochs", 2, DurationUnit.epochs),
        ("5e6tokens", 5_000_000, DurationUnit.tokens),
        ("1.5e3tokens", 1500, DurationUnit.tokens),
        (" 10 steps ", 10, DurationUnit.steps),
        (7, 7, DurationUnit.steps),
    ],
)
def test_parse(text, value, unit):
    assert Duration.parse(text) == Duration(value, unit)


@pytest.mark.parametrize("text", ["10stpes", "steps", "1.5steps", "-3steps", ""])
def test_parse_rejects(text):
    with pytest.raises(ConfigError, match="duration"):
        Duration.parse(text)


@pytest.mark.parametrize("text", ["3", " 3 ", "1e3"])
def test_a_bare_number_is_answered_with_its_unit_to_add(text):
    with pytest.raises(ConfigError, match=f"give its unit, e.g. '{text.strip()}steps'"):
        Duration.parse(text)


def test_chinchilla_arithmetic():
    assert Duration.chinchilla_tokens(1, model_params=1_000_000) == Duration.tokens(20_000_000)
    assert Duration.chinchilla_tokens(0.5, model_params=3_000_000) == Duration.tokens(30_000_000)
    assert Duration.parse("2chinchilla", model_params=1_000) == Duration.tokens(40_000)
    with pytest.raises(ConfigError, match="parameter count"):
        Duration.parse("1chinchilla")


def test_due():
    assert not Duration.steps(10).due(step=9, tokens=0, epoch=1)
    assert Duration.steps(10).due(step=10, tokens=0, epoch=1)
    assert Duration.tokens(100).due(step=1, tokens=100, epoch=1)
    assert not Duration.tokens(100).due(step=1, tokens=99, epoch=1)
    # epoch counts the epoch in progress: 2 epochs are done once epoch 3 begins
    assert not Duration.epochs(2).due(step=50, tokens=0, epoch=2)
    assert Duration.epochs(2).due(step=50, tokens=0, epoch=3)
    assert str(Duration.epochs(2)) == "2epochs"


def test_chinchilla_counts_active_non_embedding_parameters():
    untied = tiny_llama(vocab=64)  # hidden 32: the input embeddings are 64 x 32
    total = count_parameters(untied)
    # OLMo-core's num_non_embedding_params: only the input embeddings go; an untied LM head stays
    assert count_parameters(untied, non_embedding=True) == total - 64 * 32
    tied = tiny_llama(vocab=64, tie_word_embeddings=True)  # the head is the embedding tensor: counted once
    assert count_parameters(tied) == total - 64 * 32
    assert count_parameters(tied, non_embedding=True) == total - 2 * 64 * 32
    for parameter in untied.model.layers[0].parameters():
        parameter.requires_grad_(False)
    frozen = sum(p.numel() for p in untied.model.layers[0].parameters())
    assert count_parameters(untied, trainable_only=True, non_embedding=True) == total - 64 * 32 - frozen
    params = count_parameters(tied, non_embedding=True)
    assert Duration.parse("1chinchilla", model_params=params) == Duration.tokens(20 * params)


def test_chinchilla_needs_a_positive_parameter_count():
    with pytest.raises(ConfigError, match="positive parameter count"):
        Duration.parse("1chinchilla", model_params=0)


def test_a_fraction_of_an_epoch_parses_and_whole_epochs_stay_whole():
    assert Duration.parse("0.5epochs") == Duration(0.5, DurationUnit.epochs)
    assert str(Duration.parse("1.5 epochs")) == "1.5epochs"
    assert Duration.parse("2.0epochs") == Duration.epochs(2) and isinstance(Duration.parse("2.0epochs").value, int)
    for text in ("0epochs", "0.0epochs"):
        with pytest.raises(ConfigError, match="positive number of epochs"):
            Duration.parse(text)


@pytest.mark.parametrize("epochs", [0.5, 0.3, 1.25, 2.7, 3.0])
@pytest.mark.parametrize("batches", [1, 7, 10, 13])
def test_fractional_epochs_last_as_many_steps_as_transformers_trainer(tmp_path, epochs, batches):
    # transformers' Trainer: max_steps = ceil(num_train_epochs x update steps per epoch), read from its own code
    from types import SimpleNamespace

    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=epochs, per_device_train_batch_size=1,
                             report_to=[], use_cpu=True)  # fmt: skip
    trainer = SimpleNamespace(get_total_train_batch_size=lambda a: 1, get_sp_size=lambda: 1, num_examples=len)
    *_, max_steps = Trainer.set_initial_training_values(trainer, args, list(range(batches)))
    duration = Duration.parse(f"{epochs}epochs")
    assert duration.epoch_steps(batches) == max_steps
    if isinstance(duration.value, float):  # counted in steps (whole epochs end with the loader's epoch, as before)
        assert not duration.due(step=max_steps - 1, tokens=0, epoch=1, steps_per_epoch=batches)
        assert duration.due(step=max_steps, tokens=0, epoch=1, steps_per_epoch=batches)


@pytest.mark.parametrize(("duration", "steps"), [("0.5epochs", 4), ("1.3epochs", 11)])
def test_a_run_of_a_fractional_epoch_stops_at_its_step(tmp_path, duration, steps):
    from tests.helpers import make_trainer

    trainer = make_trainer(tmp_path, max_duration=duration)  # 8 steps an epoch
    assert trainer.max_steps == steps
    trainer.fit()
    assert trainer.global_step == steps


def test_a_fraction_of_an_epoch_needs_the_loaders_epoch_length():
    with pytest.raises(ConfigError, match="a fraction of an epoch needs the steps of an epoch"):
        Duration.parse("0.5epochs").due(step=3, tokens=0, epoch=1)
