#!/usr/bin/env bash
# Builds the `myriad` Python package (crates/myriad-py) as one abi3 wheel for CPython 3.9+
# into target/wheels: `bash scripts/build-wheel.sh` (release), `--debug` for a quick build.
# Installs maturin from PyPI when it is missing. Then: pip install target/wheels/myriad-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -m maturin --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet "maturin>=1.5,<2"
fi
profile=(--release)
if [ "${1:-}" = "--debug" ]; then
    profile=()
fi
rm -f target/wheels/myriad-*.whl
"$PY" -m maturin build "${profile[@]}" --locked -m crates/myriad-py/Cargo.toml -o target/wheels
ls target/wheels/myriad-*.whl
