#!/usr/bin/env bash
# Proves on CPU that a wheelhouse installs grm with no network (`make wheelhouse-check`, CI):
# builds one with scripts/build_wheelhouse.py under $CHECK_PYTHON (default python3.11: the CPU
# torch wheel this project pins exists for it), checks that no file and no bin is over 60 MiB,
# then in an EMPTY venv installs torch (the one thing the wheelhouse leaves to the machine; its
# own folder, fetched first) and runs the wheelhouse's install.sh: both with --no-index, no pip
# configuration and, where user namespaces are allowed, no network (unshare -n), so every other
# package comes from the bundle. Then smoke tests, offline too: grm --version, pip check,
# the heavy imports, grm validate, and SmolLM2's architecture built from tiny-smollm2/ at random.
# Everything lands in build/wheelhouse-check/ (the venv is removed when the check passes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${CHECK_PYTHON:-python3.11}
work=$root/build/wheelhouse-check
start=$SECONDS
rm -rf "$work"
mkdir -p "$work/torch"

# 1. with network: the model directory it packs (the test suite has fetched it already in CI),
#    the wheelhouse, and torch with what torch needs.
if [ -x .venv/bin/grm ]; then .venv/bin/grm models fetch smollm2-135m-instruct >/dev/null; fi
"$py" scripts/build_wheelhouse.py --out "$work/wheelhouse"
torch_pin=$(grep -E '^torch==' constraints.txt)
"$py" -m pip download -q -c constraints.txt -d "$work/torch" "$torch_pin"
built=$SECONDS

# 2. sizes: every file, a split wheel's parts included, and every bin at most 60 MiB.
over=$(find "$work/wheelhouse" -type f -size +$((60 * 1024 * 1024))c)
[ -z "$over" ] || { echo "wheelhouse-check: over 60 MiB: $over" >&2; exit 1; }
for bin in "$work"/wheelhouse/*-[0-9][0-9]; do
  bytes=$(find "$bin" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  [ "$bytes" -le $((60 * 1024 * 1024)) ] || { echo "wheelhouse-check: $bin holds $bytes bytes" >&2; exit 1; }
done

# 3. offline: an empty venv, no index, no pip configuration (its find-links and extra indexes),
#    and where namespaces are allowed no network at all (a network namespace with loopback only).
offline=(env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1)
if unshare -rn true 2>/dev/null; then offline=(unshare -rn "${offline[@]}") how="no network"; else how="no index"; fi
"$py" -m venv "$work/venv"
v=$work/venv/bin
"${offline[@]}" "$v/python" -m pip install -q --no-index --find-links "$work/torch" torch
"${offline[@]}" PYTHON="$v/python" bash "$work/wheelhouse/install.sh" -q

# 4. smoke, away from the checkout so that `import grm` is the installed one.
cd "$work"
"${offline[@]}" "$v/grm" --version
"${offline[@]}" "$v/python" -m pip check
"${offline[@]}" HF_HUB_OFFLINE=1 "$v/python" - "$work/wheelhouse/tiny-smollm2" "$v" <<'EOF'
import sys

import datasets, deepspeed, pydantic, ray, torch, transformers
import grm
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

assert grm.__file__.startswith(sys.argv[2].rsplit("/bin", 1)[0]), grm.__file__
config = AutoConfig.from_pretrained(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_config(config)  # random weights: the directory holds none
ids = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True, return_tensors="pt")
ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
logits = model(ids).logits
assert logits.shape == (1, ids.shape[1], config.vocab_size), logits.shape
n = sum(p.numel() for p in model.parameters()) / 1e6
print(f"imports ok (grm {grm.__version__}, torch {torch.__version__}, ray {ray.__version__}, deepspeed {deepspeed.__version__})")
print(f"tiny-smollm2: {config.model_type}, {n:.0f}M parameters at random, logits {tuple(logits.shape)}")
EOF
"${offline[@]}" "$v/grm" validate "$root/pipelines/quickstart.yaml"
rm -rf "$work/venv"
echo "wheelhouse-check: OK ($how) in $((SECONDS - start)) s (building the wheelhouse and fetching torch: $((built - start)) s)"
