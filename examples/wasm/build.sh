#!/usr/bin/env bash
# Builds the example kernels for wasm32-unknown-unknown into
# examples/wasm/queens.wasm, examples/wasm/independent-sets.wasm,
# examples/wasm/independent-sets-sweep.wasm and examples/wasm/pegs-sweep.wasm:
# stripped, one codegen unit, paths remapped, so the same toolchain gives the
# same bytes anywhere. `--check` rebuilds into a scratch directory and fails
# if the result differs from the committed modules.
#   rustup target add wasm32-unknown-unknown   # once
#   examples/wasm/build.sh [--check]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
check=false
[ "${1:-}" = "--check" ] && check=true
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export CARGO_TARGET_DIR=$scratch
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true
export CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
export RUSTFLAGS="--remap-path-prefix=$root=/tally --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
cd "$root"
cargo build --quiet --release --target wasm32-unknown-unknown \
    -p tally-example-queens -p tally-example-independent-sets \
    -p tally-example-independent-sets-sweep -p tally-example-pegs-sweep
status=0
for name in queens independent-sets independent-sets-sweep pegs-sweep; do
    built=$scratch/wasm32-unknown-unknown/release/tally_example_${name//-/_}.wasm
    committed=$root/examples/wasm/$name.wasm
    if $check; then
        if cmp -s "$built" "$committed"; then
            echo "reproduced: examples/wasm/$name.wasm ($(wc -c <"$built") bytes)"
        else
            echo "differs: examples/wasm/$name.wasm (rebuilt $(wc -c <"$built") bytes)" >&2
            status=1
        fi
    else
        cp "$built" "$committed"
        echo "built: examples/wasm/$name.wasm ($(wc -c <"$built") bytes)"
    fi
done
exit $status
