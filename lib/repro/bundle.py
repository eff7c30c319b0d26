"""Offline bundles: one archive that reruns one chapter on a machine with no network.

``repro bundle ID [--profile P] [--wheels]`` writes ``build/bundles/<id>-<profile>.tar.gz`` holding the
chapter's notebook and params, the ``repro`` wheel, the locked requirements, the chapter's DVC-tracked
data, a run script and, with ``--wheels``, every wheel the lock needs for this platform (built or copied
by pip from the registries this machine reaches, so the target needs none).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from repro import datasets, params
from repro.paths import output_root, repo_root
from repro.registry import Chapter, load_registry

RUN_SCRIPT = """#!/usr/bin/env bash
# Rerun chapter {chapter} of ReproBook from this bundle, with no network needed when wheels/ is complete.
#   bash run.sh [PROFILE] [-p key=value ...]      (PROFILE defaults to {profile})
set -euo pipefail
cd "$(dirname "$0")"
profile="${{1:-{profile}}}"; shift || true
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  if [ -f wheels/.complete ]; then
    .venv/bin/pip install -q --no-index --find-links wheels -r envs/cpu.lock
  else
    .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install -q -r envs/cpu.lock
  fi
  .venv/bin/pip install -q --no-index --no-deps wheels/repro-*.whl
  if [ -f envs/simgrid-setup.sh ]; then bash envs/simgrid-setup.sh .venv; fi
fi
export PATH="$PWD/.venv/bin:$PATH" REPRO_ROOT="$PWD" MPLCONFIGDIR="$PWD/.cache/matplotlib" \\
       RAY_TMPDIR="$PWD/.cache/ray" FLWR_HOME="$PWD/.cache/flwr" DVC_NO_ANALYTICS=1 JUPYTER_PLATFORM_DIRS=1
mkdir -p .cache/matplotlib .cache/ray .cache/flwr
repro run {chapter} --profile "$profile" "$@"
echo "results: $PWD/results/{chapter}/$profile/record.json"
"""


#: Packages a lock file leaves out (pip freeze omits them) that some locked packages still require.
BUILD_TOOLS = ("wheel", "setuptools")


@dataclass(frozen=True, kw_only=True)
class Bundle:
    """A written bundle: the archive and what it holds."""

    archive: Path
    chapter: str
    profile: str
    members: tuple[str, ...]
    wheels: int


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{shlex.join(cmd)}` failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def _stage(chapter: Chapter, profile: str, root: Path, stage: Path, wheels: bool) -> int:
    """Copy everything the bundle holds into ``stage``; return the number of third-party wheels."""
    for rel in (chapter.notebook, chapter.params_file, "envs/cpu.lock", "pyproject.toml"):
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, stage / rel)
    if chapter.family in ("collectives", "pario"):
        shutil.copy2(root / "envs" / "simgrid-setup.sh", stage / "envs" / "simgrid-setup.sh")
    for name in chapter.datasets:
        shutil.copytree(root / "data" / name, stage / "data" / name)
    present = {p.name for p in (root / "data").iterdir()} if (root / "data").is_dir() else set()
    if chapter.datasets and present == set(chapter.datasets):
        shutil.copy2(root / "data.dvc", stage / "data.dvc")  # the bundle's data is all of data/: verifiable
    (stage / "run.sh").write_text(RUN_SCRIPT.format(chapter=chapter.id, profile=profile))
    (stage / "run.sh").chmod(0o755)
    wheel_dir = stage / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(root), "-w", str(wheel_dir)],
         root)
    if not wheels:
        return 0
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-r", str(root / "envs" / "cpu.lock"),
          *BUILD_TOOLS, "-w", str(wheel_dir)], root)
    (wheel_dir / ".complete").write_text("every wheel of envs/cpu.lock is here\n")
    return sum(1 for p in wheel_dir.glob("*.whl") if not p.name.startswith("repro-"))


def write_bundle(chapter_id: str, profile: str = "smoke", wheels: bool = False, out: Path | None = None) -> Bundle:
    """Write the offline bundle of one chapter.

    Parameters
    ----------
    chapter_id
        The chapter's registry id.
    profile
        The profile ``run.sh`` runs by default (any profile can be passed to it).
    wheels
        Also pack every wheel that ``envs/cpu.lock`` needs, for a target with no network.
    out
        The archive's path (default ``build/bundles/<id>-<profile>.tar.gz``).

    Returns
    -------
    Bundle
        The archive and its contents.

    Raises
    ------
    KeyError
        For an unknown chapter.
    repro.params.ParameterError
        For an unknown profile or a profile that does not validate.
    repro.datasets.DataIntegrityError
        If a declared dataset differs from ``data.dvc`` (a bundle never packs corrupted data).
    """
    root = repo_root()
    chapter = load_registry().get(chapter_id)
    params.resolve(chapter, profile)
    for name in chapter.datasets:
        datasets.verify(name, root)  # a bundle never packs data that differs from data.dvc
    archive = Path(out) if out else output_root() / "build" / "bundles" / f"{chapter_id}-{profile}.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / chapter_id
        stage.mkdir()
        n_wheels = _stage(chapter, profile, root, stage, wheels)
        members = tuple(sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file()))
        partial = archive.with_name(archive.name + ".partial")
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:  # wheels are compressed already
            tar.add(stage, arcname=chapter_id)
        partial.replace(archive)
    return Bundle(archive=archive, chapter=chapter_id, profile=profile, members=members, wheels=n_wheels)
