#!/usr/bin/env bash
# Make SimGrid's Python binding importable from a venv (idempotent).
#
# Usage: envs/simgrid-setup.sh VENV
#
# Installs Debian's python3-simgrid + libsimgrid-dev (SimGrid 3.32, ~13 s) when
# missing, then exposes the binding to the venv's Python 3.11 through a .pth
# file that points to a folder holding a symlink to the Debian extension
# module (the venv need not be created with --system-site-packages).  Used by
# repro.collectives.simgrid_exec; see /work/shared/notes/toolchain.md.
set -euo pipefail

VENV=${1:?usage: envs/simgrid-setup.sh VENV}
[ -d "$VENV" ] || { echo "simgrid-setup: no venv at $VENV" >&2; exit 1; }
VENV=$(cd "$VENV" && pwd)
PY="$VENV/bin/python"
SO_DIR=/usr/lib/python3/dist-packages
LINK_DIR="$VENV/lib/simgrid-debian"

[ -x "$PY" ] || { echo "simgrid-setup: no interpreter at $PY" >&2; exit 1; }

if "$PY" -c "import simgrid" 2>/dev/null; then
    echo "simgrid-setup: simgrid $("$PY" -c 'import simgrid; print(simgrid.simgrid_version)') already importable"
    exit 0
fi

SUFFIX=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
SO="$SO_DIR/simgrid$SUFFIX"

if [ ! -e "$SO" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y --no-install-recommends python3-simgrid libsimgrid-dev; then
        $SUDO apt-get update
        $SUDO apt-get install -y --no-install-recommends python3-simgrid libsimgrid-dev
    fi
fi
[ -e "$SO" ] || {
    echo "simgrid-setup: $SO not found: Debian's python3-simgrid does not match this Python ($SUFFIX)" >&2
    exit 1
}

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$LINK_DIR"
ln -sfn "$SO" "$LINK_DIR/$(basename "$SO")"
# A relative line in a .pth file is resolved against site-packages: the venv may move.
"$PY" -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$LINK_DIR" "$SITE" \
    > "$SITE/simgrid-debian.pth"

"$PY" -c "import simgrid; print('simgrid-setup: simgrid', simgrid.simgrid_version, 'importable from', simgrid.__file__)"
