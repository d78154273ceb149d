#!/usr/bin/env bash
# The venv in which alibi's CounterfactualRL runs (alibi 0.9.6 needs numpy < 2 and pandas < 3, the
# project's venv has numpy 2 and pandas 3). benchmarks/peers.py calls benchmarks/peers/alibi_cfrl.py
# with this venv's python and reads its answers back as JSON.
#
#   bash benchmarks/peers/make_alibi_venv.sh [VENV_DIR]     (default: benchmarks/peers/.alibi-venv)
#
# torch: `torch==2.13.0` resolves to a CPU build on this machine's local index; a plain `torch`
# requirement elsewhere may pull a multi-GB CUDA build (set TORCH_SPEC to choose, e.g. an index URL).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-$here/.alibi-venv}"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null || py=python3
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import alibi, torch, sklearn" 2>/dev/null; then
    echo "$venv: ready"; exit 0
fi
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet ${TORCH_SPEC:-torch==2.13.0}
"$venv/bin/pip" install --quiet "alibi==0.9.6" "numpy<2" "pandas<3" "scikit-learn==1.9.1" click  # spacy (imported by alibi) needs click; typer no longer brings it
"$venv/bin/python" -c "import alibi, torch, numpy, sklearn; print('alibi', alibi.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
