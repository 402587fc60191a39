#!/usr/bin/env bash
# Prepare one lease of a lent GPU machine (issue 48): the wheels its image lacks and a clean snapshot of HEAD, both
# in folders git ignores here (.whl/, .gpu-snapshot/), so that one call measures everything benchmarks/gpu.py plans.
#
# The device image has torch 2.11 (+cu130), transformers 5.17, accelerate, triton, pandas, pyarrow; it lacks
# transformers >= 5.24 (honing's floor for some APIs), TRL, datasets, liger-kernel, torchao and pydantic 2.14.
# The snapshot is HEAD, not the working tree: other engineers' half-made edits never reach the measurement.
#
# Then, in one device call (carry .whl and .gpu-snapshot; ~9 minutes):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl; export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1; cd .gpu-snapshot &&
#   timeout 545 python3 benchmarks/gpu.py --budget-s 470 --json $OUT/gpu-h200.json | tee $OUT/gpu-log.txt
# and copy $OUT/gpu-h200.json to benchmarks/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
grep -qx '/.gpu-snapshot/' .git/info/exclude 2>/dev/null || echo '/.gpu-snapshot/' >>.git/info/exclude
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
mkdir -p .whl
# Python 3.12 is the device image's; versions are this repository's .venv's (datasets 4.8: its hub and pyarrow
# floors fit the image's packages; accelerate and huggingface_hub stay the image's)
for pkg in transformers==5.24.0 trl==1.16.0 datasets==4.8.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 \
  pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 torchao==0.18.0 liger-kernel==0.8.5; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$pkg"
done
rm -rf .gpu-snapshot && mkdir .gpu-snapshot && git archive HEAD | tar -x -C .gpu-snapshot
du -sh .whl .gpu-snapshot
