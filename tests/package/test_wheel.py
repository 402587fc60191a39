"""honing as a package: ``python -m build`` gives an sdist and, built from it, a wheel that carries the example configs
(and no tests); installed into a fresh venv beside the pinned torch, its ``honing`` runs the packaged quickstart from
another folder, finds a packaged config by its name and converts an axolotl config (its key table is package data)."""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: what an sdist is built from (the rest of the repository, tests included, is not part of the package)
SOURCES = ["honing", "configs", "pyproject.toml", "setup.py", "README.md"]
VERSION = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)


def copy_sources(folder: Path) -> Path:
    """The package's sources, without caches, in ``folder`` (so the build writes nothing into the repository)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=ignore)
        else:
            shutil.copy2(source, folder / name)
    return folder


def fresh_venv(folder: Path) -> Path:
    """A venv with no honing of its own that sees this interpreter's packages (the pinned torch) through a .pth file;
    the repository is not on its path. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    own_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # plain path lines: the folders join sys.path after the venv's own, and their .pth files (this checkout's
    # editable install among them) are not run
    (Path(own_site) / "honing_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def scrubbed_environment(cache: Path) -> dict[str, str]:
    """This process's environment without a PYTHONPATH that could reach the checkout."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**env, "HONING_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_the_built_wheel_installs_and_trains_the_packaged_quickstart_from_another_folder(tmp_path):
    sources = copy_sources(tmp_path / "src")
    dist = tmp_path / "dist"
    # the sdist first, then the wheel built from the unpacked sdist: the sdist must carry all a wheel needs
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(sources)],
        check=True,
        capture_output=True,
    )
    wheel = dist / f"honing-{VERSION}-py3-none-any.whl"
    sdist_names = tarfile.open(dist / f"honing-{VERSION}.tar.gz").getnames()
    assert f"honing-{VERSION}/configs/quickstart.yaml" in sdist_names
    assert not [name for name in sdist_names if name.split("/")[1:2] == ["tests"]]

    wheel_names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in wheel_names} == {"honing", f"honing-{VERSION}.dist-info"}  # no tests
    configs = {
        path.relative_to(REPO / "configs").as_posix()
        for path in (REPO / "configs").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert {"quickstart.yaml", "eval/reverse_task.py", "multinode/sft-7b-2x8.sbatch"} <= configs
    packaged = {name.removeprefix("honing/_configs/") for name in wheel_names if name.startswith("honing/_configs/")}
    assert packaged == configs
    tables = {path.name for path in (REPO / "honing" / "interop" / "configs" / "schema_keys").glob("*.json")}
    shipped = {name.rsplit("/", 1)[1] for name in wheel_names if name.startswith("honing/interop/configs/schema_keys/")}
    assert tables and shipped == tables  # the other systems' key tables are package data, read by honing convert

    python = fresh_venv(tmp_path / "venv")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True)
    env = scrubbed_environment(tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = subprocess.run(
        [str(python), "-c", "import honing.cli; print(honing.__file__); print(honing.cli.QUICKSTART)"],
        cwd=elsewhere,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    installed = tmp_path / "venv" / "lib"
    assert [Path(path).is_relative_to(installed) for path in where] == [True, True], where
    assert where[1].endswith("honing/_configs/quickstart.yaml")

    honing = str(tmp_path / "venv" / "bin" / "honing")
    version = subprocess.run([honing, "--version"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert (version.returncode, version.stdout.strip()) == (0, f"honing {VERSION}")
    axolotl = REPO / "tests" / "interop" / "configs" / "foreign" / "axolotl" / "lora-alpaca.yml"
    convert = [honing, "convert", str(axolotl)]
    converted = subprocess.run(convert, cwd=elsewhere, env=env, capture_output=True, text=True)
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert "translated from the axolotl config" in converted.stdout
    show = [honing, "config", "show", "sft-full"]
    by_name = subprocess.run(show, cwd=elsewhere, env=env, capture_output=True, text=True)
    assert by_name.returncode == 0, by_name.stderr[-2000:]
    assert "run_name: sft-full\n" in by_name.stdout  # a packaged config named as the docs name it, from elsewhere
    assert "_configs/sft-full.yaml" in by_name.stderr  # the info line says which file that is

    save_folder = tmp_path / "run"
    train = [honing, "train", "trainer.max_duration=3steps", f"trainer.save_folder={save_folder}"]
    done = subprocess.run(train, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 3
    assert (save_folder / "step3" / ".complete").is_file()
    assert (save_folder / "hf" / "model.safetensors").is_file()
    assert "run_name: quickstart" in (save_folder / "config.yaml").read_text()
    assert not (elsewhere / "runs").exists()  # the save folder came from the command line, not the packaged file
