#!/usr/bin/env bash
# Installs requirements-torch.txt (the pinned PyTorch wheel and CUDA 13.0's nvcc) into
# the virtual environment VENV, and prints nothing when it is already there.
# Usage: scripts/install-torch.sh VENV REQUIREMENTS
set -euo pipefail
venv=$1 requirements=$2
if [ ! -x "$venv/bin/python" ]; then
  echo "creating the virtual environment $venv (Debian's python3-venv)"
  /usr/bin/python3 -m venv "$venv"
fi
echo "installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv (about 4.7 GB: the CUDA wheel and its nvidia-* libraries)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir -r "$requirements"
# The pip CUDA toolkit ships only versioned libraries (libcudart.so.13); CMake's FindCUDA,
# which the wheel's Torch config runs, looks for the unversioned names a toolkit has.
cuda_lib=$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))')
for versioned in "$cuda_lib"/lib*.so.*; do
  name=$(basename "$versioned")
  case $name in *.alt.so*) continue ;; esac
  plain=${name%%.so.*}.so
  [ -e "$cuda_lib/$plain" ] || ln -s "$name" "$cuda_lib/$plain"
done
