#!/usr/bin/env bash
# On the GPU server, in the checkout, with the wheels in .whl/: install them beside the server's
# own torch, offline, into /tmp/site; then `export PYTHONPATH=/tmp/site:$PWD`.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site:$PWD python3 -c "import torch, optuna, hydra, omegaconf, sqlalchemy, sweeper.search.sweep; \
print('sweeper ready: torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'optuna', optuna.__version__)"
