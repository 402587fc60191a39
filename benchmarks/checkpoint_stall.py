"""Checkpoint stall: how long training is blocked by a synchronous save vs an asynchronous one, for the
same model (tens of MB of model and optimizer state), to a local folder and to S3 (a moto server on
loopback); prints the blocked seconds per save and the ratio async / sync (target: at most 10%).

Blocked time is measured on the training thread only: the time inside ``save_checkpoint`` or
``save_checkpoint_async`` (which includes waiting for the previous asynchronous save, if it is still
being written when the next one starts). The writes and uploads that run in the background are not
counted; they are waited for after the run. For S3, "sync direct" is the naive baseline: DCP writing
to S3 from the training thread (a Checkpointer without uploader); honing's default ("sync"/"async")
writes a local work copy and uploads it in the background.

Run it alone on a quiet machine (it is not part of ``make bench``):

    .venv/bin/python benchmarks/checkpoint_stall.py [--saves 4] [--steps-between 5] [--hidden 384]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # for tests.s3_server (the moto server the tests use)

SEQ_LEN, BATCH, VOCAB = 64, 8, 8192


def build_trainer(save_folder: str, *, hidden: int, saves: int, steps_between: int, async_save: bool, uploader: bool):
    """A Llama of ``hidden`` width with AdamW, saving every ``steps_between`` steps, ``saves`` times."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from honing.data.loader import DataLoader
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.lm import LMTrainModule
    from honing.optim.param_groups import build_adamw
    from honing.train.callbacks.checkpointer import CheckpointerCallback

    class Rows(torch.utils.data.Dataset):
        def __init__(self):
            self.data = torch.randint(0, VOCAB, (BATCH * 16, SEQ_LEN), generator=torch.Generator().manual_seed(0))
            self.tokens_per_row = SEQ_LEN

        def __len__(self):
            return len(self.data)

        def __getitem__(self, index):
            return {"input_ids": self.data[index], "labels": self.data[index]}

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=hidden,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=hidden * 2,
            vocab_size=VOCAB,
            max_position_embeddings=SEQ_LEN,
        )
    )
    module = LMTrainModule(
        model,
        build_adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8),
        micro_batch_size=BATCH,
        scheduler={"name": "constant"},
    )
    checkpointer = CheckpointerCallback(save_interval=steps_between, async_save=async_save)
    trainer = TrainerConfig(
        save_folder=save_folder, max_duration=f"{saves * steps_between}steps", callbacks={"checkpointer": checkpointer}
    ).build(module, DataLoader(Rows(), global_batch_size=BATCH))
    if not uploader:
        trainer.checkpointer.uploader = None  # DCP writes to the URL from the saving thread
    return trainer


def state_megabytes(trainer) -> float:
    """Model and optimizer state a checkpoint holds, in MB (after one step, when AdamW has its moments)."""
    import torch

    def size(value):
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, dict):
            return sum(size(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(size(v) for v in value)
        return 0

    return size(trainer.train_module.state_dict_to_save()) / 1e6


def timed(function, durations: list[float]):
    """``function``, appending the seconds each call takes to ``durations``."""

    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - start)

    return run


def measure(save_folder: str, *, async_save: bool, uploader: bool = True, **sizes) -> tuple[float, float, float, float]:
    """(median blocked seconds per save, total blocked seconds, seconds waiting for uploads after training,
    wall seconds of the whole run)."""
    trainer = build_trainer(save_folder, async_save=async_save, uploader=uploader, **sizes)
    blocked: list[float] = []
    after: list[float] = []
    trainer.save_checkpoint = timed(trainer.save_checkpoint, blocked)
    trainer.save_checkpoint_async = timed(trainer.save_checkpoint_async, blocked)
    trainer.checkpointer.wait_for_uploads = timed(trainer.checkpointer.wait_for_uploads, after)
    start = time.perf_counter()
    trainer.fit()
    return statistics.median(blocked), sum(blocked), sum(after), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=4)
    parser.add_argument("--steps-between", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--no-s3", action="store_true", help="only the local folder")
    args = parser.parse_args()
    sizes = dict(hidden=args.hidden, saves=args.saves, steps_between=args.steps_between)

    import logging
    import warnings

    import torch

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["HONING_CACHE_DIR"] = os.path.join(scratch, "cache")
        probe = build_trainer(os.path.join(scratch, "probe"), async_save=False, uploader=True, **sizes)
        probe.train_module.train_batch(next(iter(probe.data_loader)))
        probe.train_module.optim_step()
        print(
            f"model + optimizer state: {state_megabytes(probe):.0f} MB | {args.saves} saves, one every "
            f"{args.steps_between} steps | torch {torch.__version__}, {torch.get_num_threads()} threads"
        )
        rows = [
            ("local", "sync", measure(os.path.join(scratch, "sync"), async_save=False, **sizes)),
            ("local", "async", measure(os.path.join(scratch, "async"), async_save=True, **sizes)),
        ]
        if not args.no_s3:
            from tests.s3_server import BUCKET, CREDENTIALS, MotoServer

            server = MotoServer()
            try:
                server.client.create_bucket(Bucket=BUCKET)
                os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=server.endpoint)
                rows += [
                    ("s3", "sync direct", measure(f"s3://{BUCKET}/direct", async_save=False, uploader=False, **sizes)),
                    ("s3", "sync", measure(f"s3://{BUCKET}/sync", async_save=False, **sizes)),
                    ("s3", "async", measure(f"s3://{BUCKET}/async", async_save=True, **sizes)),
                ]
            finally:
                server.stop()
    print(f"{'storage':8} {'save':12} {'blocked/save':>13} {'blocked total':>14} {'upload wait':>12} {'run':>8}")
    for storage, mode, (median, total, tail, wall) in rows:
        print(f"{storage:8} {mode:12} {median:12.3f}s {total:13.3f}s {tail:11.3f}s {wall:7.2f}s")
    by = {(storage, mode): total for storage, mode, (_, total, _, _) in rows}
    print(f"local: async / sync blocked time = {by['local', 'async'] / by['local', 'sync']:.1%} (target <= 10%)")
    if not args.no_s3:
        print(
            f"s3:    async / sync blocked time = {by['s3', 'async'] / by['s3', 'sync']:.1%} (target <= 10%); "
            f"async / sync direct = {by['s3', 'async'] / by['s3', 'sync direct']:.1%}"
        )


if __name__ == "__main__":
    main()
