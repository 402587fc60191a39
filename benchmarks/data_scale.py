"""Data at scale: ``honing prepare`` tokens/s, the token-shard loader's tokens/s alone, and the peak RSS of
prepare and of 50 training steps, for a small corpus and (``--big``) one ~10x larger, ~1 GB.

The corpus is the Python standard library's source files as JSON Lines documents, shuffled and repeated up
to the size asked for (written line by line: the generator holds one file at a time). Each measurement runs
in its own subprocess, started through a wrapper process that reports ``ru_maxrss`` of its children: the
largest single process (for prepare: the main process or one of its workers, whichever peaked higher).

Printed ratios (the issue's targets):
- loader tokens/s / the quickstart's training tokens/s: at least 20x (the loader is never the bottleneck);
- training peak RSS, big corpus / small corpus: within a few per cent (memory does not grow with the corpus).

Two more measurements (issue 24), each run alone when its flag is given:

- ``--text-files``: ``prepare`` of one single text file (``format: text``) of each ``--text-mb`` size (200 MiB and
  2 GiB), once as one document and once split on ``data.text_document_separator: "\n\n"``: peak RSS at most
  1.5 GiB in every case, and the largest / smallest file's within 1.2x. The file is the standard library's source
  joined by blank lines, written under ``--work`` (a temporary folder) and deleted with its shards after each size.
- ``--train-memory``: training from a ``--train-small-mb`` (3 MiB) and a ``--train-big-mb`` (300 MiB) prepared
  corpus: the training process's peak RSS (``VmHWM``, which counts file-backed pages such as the shards' memory
  maps) and its anonymous peak (``RssAnon`` of ``/proc/self/status`` sampled every 10 ms from a thread: the kernel
  keeps no high-water mark of it), big / small at most 1.1x.

Run it alone on a quiet machine (it is not part of ``make bench``):

    .venv/bin/python benchmarks/data_scale.py [--big] [--small-mb 100] [--big-mb 1024] [--workers 2]
    .venv/bin/python benchmarks/data_scale.py --text-files --train-memory  # issue 24's figures, ~7 minutes
    .venv/bin/python benchmarks/data_scale.py --small-mb 1 --steps 3 --quickstart-steps 3 --loader-batches 20  # a check
    .venv/bin/python benchmarks/data_scale.py --text-files --text-mb 2 8 --train-memory --train-small-mb 1 \
        --train-big-mb 4 --steps 3  # a check of the new modes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(REPO, "configs", "quickstart.yaml")
TRAIN_OFF = [  # the training loop alone: no evaluation, samples, checkpoints or export in the measurement
    "callbacks.evaluator.enabled=false",
    "callbacks.sample.enabled=false",
    "callbacks.console.enabled=false",
    "callbacks.checkpointer.save_interval=100000",
    "data.validation_split=0",
]


def write_corpus(path: str, megabytes: float, seed: int = 0, *, as_text: bool = False) -> int:
    """JSON Lines of standard-library source files (or, ``as_text``, the files themselves joined by blank lines),
    shuffled and repeated to ``megabytes``; its size in bytes."""
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(
        os.path.join(parent, name) for parent, _, names in os.walk(root) for name in names if name.endswith(".py")
    )
    rng, target, written = random.Random(seed), int(megabytes * 2**20), 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            rng.shuffle(files)
            for file in files:
                try:
                    with open(file, encoding="utf-8") as source:
                        text = source.read()
                except (UnicodeDecodeError, OSError):
                    continue
                line = text + "\n\n" if as_text else json.dumps({"text": text}) + "\n"
                out.write(line)
                written += len(line.encode("utf-8"))
                if written >= target:
                    break
    return written


def measured(*command: str) -> dict:
    """Run ``command`` (this script's child modes) in a fresh wrapper process; its JSON result plus peak RSS."""
    wrapper = [sys.executable, os.path.abspath(__file__), "_rss", *command]
    result = subprocess.run(wrapper, capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def child_rss(command: list[str]) -> None:
    """``_rss CMD...``: run this script in mode CMD and print its JSON result with the children's ru_maxrss."""
    result = subprocess.run([sys.executable, os.path.abspath(__file__), *command], capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr, file=sys.stderr)
        sys.exit(result.returncode)
    values = json.loads(result.stdout.strip().splitlines()[-1])
    values["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps(values))


def child_prepare(corpus: str, out: str, workers: int) -> None:
    """``_prepare``: prepare the corpus with the quickstart's tokenizer; prepare's own seconds and tokens."""
    from honing.config import load_config
    from honing.recipes.pretrain import PretrainRecipe

    config = load_config(QUICKSTART, [f"data.train.sources=[{{path: {corpus}}}]"])
    start = time.perf_counter()
    index = PretrainRecipe(config).prepare(out, workers=workers, shard_bytes=64 * 2**20).index
    print(json.dumps({"seconds": time.perf_counter() - start, "tokens": index.num_tokens}))


def child_prepare_text(corpus: str, out: str, workers: int, separator: str) -> None:
    """``_prepare_text``: one text file prepared as ``honing prepare`` does (default shard size), as one document
    (separator ``none``) or split on the JSON-encoded ``separator``; prepare's own seconds, tokens and documents."""
    from honing.config import load_config
    from honing.recipes.pretrain import PretrainRecipe

    overrides = [f"data.train.sources=[{{path: {corpus}, format: text}}]"]
    if separator != "none":
        overrides.append(f"data.text_document_separator={separator}")
    config = load_config(QUICKSTART, overrides)
    start = time.perf_counter()
    index = PretrainRecipe(config).prepare(out, workers=workers).index
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "tokens": index.num_tokens, "documents": index.num_documents}))


def child_loader(folder: str, batches: int) -> None:
    """``_loader``: the quickstart's rows (seq_len 256, batch 16) from the shards, collated, nothing else."""
    from honing.data.collate import stack_collate
    from honing.data.loader import DataLoader
    from honing.data.text.token_windows import RowWindow, TokenRows, TokenSource

    source = TokenSource(folder, 256, cache_dir=tempfile.gettempdir())
    rows = TokenRows([RowWindow(source, 0, source.num_rows)], seed=0)
    loader = DataLoader(rows, global_batch_size=16, collate_fn=stack_collate, seed=0)
    done, start = 0, time.perf_counter()
    while done < batches:
        for _ in loader:
            done += 1
            if done == batches:
                break
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "tokens_per_s": batches * 16 * 256 / seconds}))


def memory_status() -> dict[str, int]:
    """``VmHWM`` (peak RSS), ``RssAnon`` and ``RssFile`` of this process from ``/proc/self/status``, in KiB."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "RssAnon", "RssFile"):
                found[key] = int(value.split()[0])
    return found


class AnonPeak:
    """The largest ``RssAnon`` seen by a thread that reads it every ``interval`` seconds (Linux keeps a
    high-water mark of the whole RSS, ``VmHWM``, but none of its anonymous part)."""

    def __init__(self, interval: float = 0.01):
        self.interval, self.peak_kib, self.stopped = interval, 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopped.is_set():
            self.peak_kib = max(self.peak_kib, memory_status().get("RssAnon", 0))
            self.stopped.wait(self.interval)

    def stop(self) -> int:
        """Stop sampling; the peak in KiB."""
        self.stopped.set()
        self.thread.join()
        return max(self.peak_kib, memory_status().get("RssAnon", 0))


def child_train(overrides: list[str]) -> None:
    """``_train``: the quickstart with ``overrides``; the trainer's tokens/s over the last steps, and this
    process's peak RSS (``VmHWM``) and sampled anonymous peak."""
    from honing.config import load_config
    from honing.recipes.pretrain import PretrainRecipe

    anon = AnonPeak()
    config = load_config(QUICKSTART, [*TRAIN_OFF, *overrides])
    start = time.perf_counter()
    PretrainRecipe(config).run()
    seconds = time.perf_counter() - start
    anon_peak_kib = anon.stop()
    rows = [json.loads(line) for line in open(os.path.join(config.trainer.save_folder, "metrics.jsonl"))]
    speeds = [row["throughput/tokens_per_s"] for row in rows if "throughput/tokens_per_s" in row]
    print(
        json.dumps(
            {
                "seconds": seconds,
                "tokens_per_s": speeds[-1] if speeds else 0.0,
                "hwm_mib": memory_status()["VmHWM"] / 1024,
                "anon_peak_mib": anon_peak_kib / 1024,
            }
        )
    )


def run_corpus(name: str, megabytes: float, work: str, args: argparse.Namespace) -> dict:
    """Generate, prepare, read and train on one corpus."""
    corpus = os.path.join(work, f"{name}.jsonl")
    size = write_corpus(corpus, megabytes)
    out = os.path.join(work, f"{name}-tokens")
    prepare = measured("_prepare", corpus, out, str(args.workers))
    loader = measured("_loader", out, str(args.loader_batches))
    train = measured(
        "_train",
        f"data.train.sources=[{{path: {out}, format: tokens}}]",
        f"trainer.max_duration={args.steps}steps",
        f"trainer.save_folder={os.path.join(work, name + '-run')}",
    )
    return {"name": name, "bytes": size, "prepare": prepare, "loader": loader, "train": train}


def check_disk(folder: str, needed_bytes: int) -> None:
    """Stop before writing when ``folder``'s disk has less than ``needed_bytes`` free."""
    free = shutil.disk_usage(folder).free
    if free < needed_bytes:
        sys.exit(f"{folder}: {free / 2**30:.1f} GiB free, this measurement writes up to {needed_bytes / 2**30:.1f} GiB")


def run_text_files(work: str, args: argparse.Namespace) -> list[dict]:
    """(a) prepare one text file of each size, as one document and split on blank lines; files deleted after."""
    results = []
    for megabytes in args.text_mb:
        corpus = os.path.join(work, f"text-{megabytes:g}mb.txt")
        # the file, plus its shards (2 bytes per byte-level token) for one run at a time
        check_disk(work, int(megabytes * 2**20 * 3.3))
        size = write_corpus(corpus, megabytes, as_text=True)
        try:
            for separator in ("none", json.dumps("\n\n")):
                out = os.path.join(work, f"text-{megabytes:g}mb-tokens")
                start = time.perf_counter()
                prepare = measured("_prepare_text", corpus, out, str(args.workers), separator)
                prepare["wall_seconds"] = time.perf_counter() - start
                shutil.rmtree(out, ignore_errors=True)
                results.append({"bytes": size, "separator": separator, "prepare": prepare})
        finally:
            os.remove(corpus)
    return results


def run_train_memory(work: str, args: argparse.Namespace) -> list[dict]:
    """(c) training's peak RSS and anonymous peak from a small and a big prepared corpus."""
    results = []
    for name, megabytes in (("train-small", args.train_small_mb), ("train-big", args.train_big_mb)):
        check_disk(work, int(megabytes * 2**20 * 3.3))
        corpus = os.path.join(work, f"{name}.jsonl")
        size = write_corpus(corpus, megabytes)
        out = os.path.join(work, f"{name}-tokens")
        try:
            prepare = measured("_prepare", corpus, out, str(args.workers))
            train = measured(
                "_train",
                f"data.train.sources=[{{path: {out}, format: tokens}}]",
                f"trainer.max_duration={args.steps}steps",
                f"trainer.save_folder={os.path.join(work, name + '-run')}",
            )
        finally:
            os.remove(corpus)
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(os.path.join(work, name + "-run"), ignore_errors=True)
        results.append({"name": name, "bytes": size, "tokens": prepare["tokens"], "train": train})
    return results


def print_text_files(results: list[dict]) -> None:
    """The (a) table and its checks."""
    print("\n| text file | documents | tokens | prepare seconds | prepare tokens/s | prepare peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        prepare, split = r["prepare"], "one document" if r["separator"] == "none" else f"split on {r['separator']}"
        print(
            f"| {r['bytes'] / 2**20:,.0f} MiB, {split} | {prepare['documents']:,} | {prepare['tokens']:,} | "
            f"{prepare['seconds']:.0f} | {prepare['tokens'] / prepare['seconds']:,.0f} | "
            f"{prepare['peak_rss_mib']:,.0f} MiB |"
        )
    worst = max(r["prepare"]["peak_rss_mib"] for r in results)
    print(f"\nprepare peak RSS, largest of all: {worst:,.0f} MiB (target <= 1,536 MiB)")
    for separator in ("none", json.dumps("\n\n")):
        runs = sorted((r for r in results if r["separator"] == separator), key=lambda r: r["bytes"])
        if len(runs) > 1:
            ratio = runs[-1]["prepare"]["peak_rss_mib"] / runs[0]["prepare"]["peak_rss_mib"]
            print(
                f"prepare peak RSS {runs[-1]['bytes'] / 2**20:,.0f} MiB / {runs[0]['bytes'] / 2**20:,.0f} MiB file, "
                f"separator {separator}: {ratio:.3f} (target <= 1.2)"
            )


def print_train_memory(results: list[dict]) -> None:
    """The (c) table and its ratios."""
    print("\n| corpus | input | tokens | train peak RSS (VmHWM) | train anonymous peak (sampled) |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        train = r["train"]
        print(
            f"| {r['name']} | {r['bytes'] / 2**20:,.1f} MiB | {r['tokens']:,} | {train['hwm_mib']:,.0f} MiB | "
            f"{train['anon_peak_mib']:,.0f} MiB |"
        )
    small, big = (r["train"] for r in results)
    print(f"\ntraining peak RSS big / small: {big['hwm_mib'] / small['hwm_mib']:.3f} (target <= 1.1)")
    print(f"training anonymous peak big / small: {big['anon_peak_mib'] / small['anon_peak_mib']:.3f} (target <= 1.1)")


def main() -> None:
    """Parse the options, run the corpora and print the table and the ratios."""
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        mode, rest = sys.argv[1], sys.argv[2:]
        if mode == "_rss":
            return child_rss(rest)
        if mode == "_prepare":
            return child_prepare(rest[0], rest[1], int(rest[2]))
        if mode == "_prepare_text":
            return child_prepare_text(rest[0], rest[1], int(rest[2]), rest[3])
        if mode == "_loader":
            return child_loader(rest[0], int(rest[1]))
        return child_train(rest)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", action="store_true", help="also the big corpus (~1 GB)")
    parser.add_argument("--small-mb", type=float, default=100.0)
    parser.add_argument("--big-mb", type=float, default=1024.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50, help="training steps for the RSS measurement")
    parser.add_argument("--quickstart-steps", type=int, default=30, help="steps of the quickstart for its tokens/s")
    parser.add_argument("--loader-batches", type=int, default=2000)
    parser.add_argument("--work", help="folder for corpora and shards (default: a temporary folder)")
    parser.add_argument("--text-files", action="store_true", help="(a) prepare's peak RSS on single text files")
    parser.add_argument("--text-mb", type=float, nargs="+", default=[200.0, 2048.0], help="sizes for --text-files")
    parser.add_argument("--train-memory", action="store_true", help="(c) training memory, small vs big corpus")
    parser.add_argument("--train-small-mb", type=float, default=3.0)
    parser.add_argument("--train-big-mb", type=float, default=300.0)
    args = parser.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="honing-data-scale-")
    os.makedirs(work, exist_ok=True)
    if args.text_files or args.train_memory:
        text_results = run_text_files(work, args) if args.text_files else []
        train_results = run_train_memory(work, args) if args.train_memory else []
        if text_results:
            print_text_files(text_results)
        if train_results:
            print_train_memory(train_results)
        print(f"work folder: {work} (its corpora and shards are deleted)")
        return
    quickstart = measured(
        "_train", f"trainer.max_duration={args.quickstart_steps}steps", f"trainer.save_folder={work}/quickstart"
    )
    results = [run_corpus("small", args.small_mb, work, args)]
    if args.big:
        results.append(run_corpus("big", args.big_mb, work, args))

    speed, rss = quickstart["tokens_per_s"], quickstart["peak_rss_mib"]
    print(f"\nquickstart training: {speed:,.0f} tokens/s, peak RSS {rss:.0f} MiB")
    print("| corpus | input | tokens | prepare tokens/s | prepare peak RSS | loader tokens/s | train peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        prepare, loader, train = r["prepare"], r["loader"], r["train"]
        print(
            f"| {r['name']} | {r['bytes'] / 2**20:,.0f} MiB | {prepare['tokens']:,} | "
            f"{prepare['tokens'] / prepare['seconds']:,.0f} | {prepare['peak_rss_mib']:.0f} MiB | "
            f"{loader['tokens_per_s']:,.0f} | {train['peak_rss_mib']:.0f} MiB |"
        )
    loader_ratio = results[0]["loader"]["tokens_per_s"] / max(quickstart["tokens_per_s"], 1e-9)
    print(f"\nloader tokens/s / quickstart training tokens/s: {loader_ratio:.0f}x (target >= 20x)")
    if args.big:
        small, big = results
        train_ratio = big["train"]["peak_rss_mib"] / small["train"]["peak_rss_mib"]
        prepare_ratio = big["prepare"]["peak_rss_mib"] / small["prepare"]["peak_rss_mib"]
        print(f"training peak RSS big / small: {train_ratio:.3f} (target: within a few per cent)")
        print(f"prepare peak RSS big / small: {prepare_ratio:.3f}")
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
