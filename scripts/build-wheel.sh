#!/usr/bin/env bash
# Builds the `myriad` Python package (crates/myriad-py) as one abi3 wheel for CPython 3.9+
# into target/wheels: `bash scripts/build-wheel.sh` (release), `--debug` for a quick build.
# Uses $PYTHON (else a virtual environment of its own under target/, never the system's
# Python) and installs maturin there from PyPI when it is missing. Then:
# pip install target/wheels/myriad-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
else
    if [ ! -x target/wheel-build-env/bin/python ]; then
        python3 -m venv target/wheel-build-env
    fi
    PY=target/wheel-build-env/bin/python
fi
if ! "$PY" -m maturin --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2"
fi
profile=(--release)
if [ "${1:-}" = "--debug" ]; then
    profile=()
fi
rm -f target/wheels/myriad-*.whl
"$PY" -m maturin build "${profile[@]}" --locked -m crates/myriad-py/Cargo.toml -o target/wheels
ls target/wheels/myriad-*.whl
