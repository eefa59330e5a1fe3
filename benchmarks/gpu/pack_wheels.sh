#!/usr/bin/env bash
# Wheels of what a GPU server without network lacks (it has torch, torchvision, pandas,
# matplotlib, psutil, pyarrow, PyYAML, tqdm): run this where pip reaches PyPI, carry the folder.
#   bash benchmarks/gpu/pack_wheels.sh [PYTHON_VERSION] [DIR]     defaults: 3.12 .whl
set -euo pipefail
py=${1:-3.12}
dir=${2:-.whl}
mkdir -p "$dir"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# the versions sweeper is tested with; greenlet and SQLAlchemy are compiled, the rest pure Python;
# jsonargparse and its two for LightningCLI (examples/lightning_train.py), where Lightning is installed
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
  "${platforms[@]}" -d "$dir" \
  optuna==5.0.0 hydra-core==1.3.8 omegaconf==2.3.1 SQLAlchemy==2.1.9 alembic==1.20.1 Mako==1.4.3 \
  colorlog==6.12.0 greenlet==3.5.6 \
  jsonargparse==4.53.0 docstring_parser==0.18.0 typeshed_client==2.15.0
# the one Hydra needs that has no wheel on the registry: build it (pure Python, any version)
python3 -m pip wheel -q --no-deps -w "$dir" antlr4-python3-runtime==4.9.3
ls "$dir"
