#!/usr/bin/env bash
# Installs grm-rlaif[train] from this wheelhouse with no network (copied here as install.sh by
# scripts/build_wheelhouse.py). Works with whichever bins (need-NN/, spare-NN/) were carried:
# split wheels are re-joined, every whole file present is checked against MANIFEST.sha256, then
# pip installs from these files alone; a package still missing makes pip name it.
#   bash wheelhouse/install.sh [more pip install arguments]     PYTHON=... picks the interpreter
set -euo pipefail
shopt -s nullglob
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
flat="$here/.flat" # one folder for pip: links to the whole wheels, the split ones re-joined
rm -rf "$flat"
mkdir "$flat"
for f in "$here"/*/*.whl; do ln -s "$f" "$flat/"; done
for first in "$here"/*/*.whl.part-aa; do
  name=$(basename "${first%.part-aa}")
  for s in {a..z}{a..z}; do # the parts in order, whichever bin holds each; stop at the first gap
    part=("$here"/*/"$name.part-$s")
    [ ${#part[@]} -gt 0 ] || break
    cat "${part[0]}"
  done >"$flat/$name"
done
[ -d "$here/tiny-smollm2" ] && ln -s "$here/tiny-smollm2" "$flat/"
(cd "$flat" && sha256sum --quiet --ignore-missing -c "$here/MANIFEST.sha256") || {
  echo "install.sh: a file above does not match MANIFEST.sha256 (a split wheel with a part's bin not carried?)" >&2
  exit 1
}
wheels=("$flat"/*.whl)
echo "install.sh: ${#wheels[@]} wheels checked; pip install --no-index grm-rlaif[train]"
"$py" -m pip install --no-index --find-links "$flat" "grm-rlaif[train]" "$@"
