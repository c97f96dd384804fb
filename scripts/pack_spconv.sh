#!/usr/bin/env bash
# Pack native spconv 2.x (CUDA 12.6 build) and its pure-Python dependencies for the H200 device machine, which
# cannot reach a registry: wheels are unpacked into one site tree, compressed, and split into folders
# .spconv1 .. .spconvN (at most 60 MiB each, ignored by git) to carry one per device call.
# On the device machine, in order:  cat .spconv1/part > /tmp/sp.tar.xz ; cat .spconvK/part >> /tmp/sp.tar.xz
# then:  mkdir -p /tmp/spsite && xz -dc /tmp/sp.tar.xz | tar xf - -C /tmp/spsite  and put /tmp/spsite on PYTHONPATH.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
grep -qx '/.spconv\*/' .git/info/exclude 2>/dev/null || echo '/.spconv*/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/whl" spconv-cu126==2.3.8 cumm-cu126==0.8.2 pccm ccimport fire pybind11 lark
mkdir -p "$work/site"
for w in "$work"/whl/*.whl; do (cd "$work/site" && python3 -m zipfile -e "$w" .); done
(cd "$work/site" && tar cf - .) | xz -T0 -6 > "$work/site.tar.xz"
rm -rf .spconv[0-9]*
split -b 62914560 -d -a 1 "$work/site.tar.xz" "$work/part."
i=0
for p in "$work"/part.*; do i=$((i+1)); mkdir -p ".spconv$i"; mv "$p" ".spconv$i/part"; done
echo "packed spconv-cu126 2.3.8 + deps into $i folders: $(ls -d .spconv[0-9]* | tr '\n' ' ')"
