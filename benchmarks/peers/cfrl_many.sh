#!/usr/bin/env bash
# CFRL on every work folder under WORK_ROOT at once, one process per cell, on a machine that has torch,
# scikit-learn and numpy but not the project (the lent GPU machine): the folders come from
#   python benchmarks/cfrl_budget.py --prepare WORK_ROOT --deadline SECONDS --threads N ...
# and go back for scoring with
#   python benchmarks/cfrl_budget.py --collect WORK_ROOT --machine "..."
#
#   bash benchmarks/peers/cfrl_many.sh WORK_ROOT [WHEEL_DIR]
#
# WHEEL_DIR (optional): wheels installed first into a private folder (alibi and dill, with --no-deps;
# nothing can be fetched there). Each cell's progress goes to WORK_ROOT/<cell>/log.
set -uo pipefail
root="$1"
wheels="${2:-}"
py="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -n "$wheels" ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/cfrl-site "$wheels"/*.whl || exit 1
    export PYTHONPATH=/tmp/cfrl-site${PYTHONPATH:+:$PYTHONPATH}
fi
# fail in seconds, not after the training, if alibi cannot be imported here
"$py" -c "import sys; sys.path.insert(0, '$here'); from alibi_cfrl import stand_in_for_spacy; stand_in_for_spacy(); \
from alibi.explainers import CounterfactualRLTabular; import torch, sklearn, numpy; \
print('alibi ready; torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'sklearn', sklearn.__version__, 'numpy', numpy.__version__)" || exit 1
pids=()
for work in "$root"/*/; do
    "$py" "$here/alibi_cfrl.py" "$work" >"$work/log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for work in "$root"/*/; do
    echo "== $work: $(grep -a -E 'checkpoint|deadline' "$work/log" | tr '\n' ';' | tail -c 400)"
done
exit $status
