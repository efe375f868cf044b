#!/usr/bin/env bash
# The Python package's tests (crates/myriad-py/tests, pytest) against real local clusters
# started with target/debug/myriad: builds the wheel (debug), installs it with what the
# tests use (pytest, fsspec, pandas, pyarrow, boto3, prometheus-client, playwright driving the
# system's Chromium, and the S3 tools s3cmd and awscli; rclone is Debian's, .ci/run) into
# a virtual environment under target/, runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/py-test-env
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin>=1.5,<2" pytest fsspec pandas pyarrow boto3 prometheus-client playwright s3cmd awscli
# The whole workspace's binaries, with the features `cargo test --workspace` built them
# with: building the one package alone would unify features differently and rebuild.
cargo build --locked --workspace --bins
PYTHON="$venv/bin/python" bash scripts/build-wheel.sh --debug
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/myriad-*.whl
MYRIAD_REQUIRE_BROWSER=1 MYRIAD_REQUIRE_S3_TOOLS=1 MYRIAD_BIN="$PWD/target/debug/myriad" "$venv/bin/python" -m pytest -q crates/myriad-py/tests "$@"
# The package from a client host of a cluster made with --init/--join over network
# namespaces (Python, fsspec, boto3 through the S3 gateway, `top`): a Rust test that needs
# the package installed, so it runs here, not with the others.
MYRIAD_PYTHON="$PWD/$venv/bin/python" cargo test -p myriad-cli --test it --locked -- \
    --ignored --exact deploy::python_s3_and_top_from_a_client_host
