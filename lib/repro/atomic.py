"""Atomic file writes: write a temporary file beside the target, then rename.

A reader (or a later run) never sees a half-written file: either the old
content or the complete new one.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (fsync, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # the usual permissions, not mkstemp's 600
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as sorted, indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=float) + "\n")


def replace_dir(src: Path, dst: Path) -> None:
    """Move folder ``src`` to ``dst``, replacing ``dst`` as a whole.

    The old ``dst`` is renamed aside first and removed only after ``src`` is in
    place, so ``dst`` is never a mixture of old and new files.
    """
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    old = dst.with_name(f".{dst.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if dst.exists():
        os.replace(dst, old)
    os.replace(src, dst)
    if old.exists():
        shutil.rmtree(old)


def exchange_dirs(src: Path, dst: Path) -> None:
    """Put folder ``src`` in place of ``dst`` in one step; the old ``dst`` ends up at ``src``.

    Uses Linux's ``renameat2(RENAME_EXCHANGE)``, so at every instant ``dst`` is
    either the complete old folder or the complete new one.  When ``dst`` does
    not exist yet, a plain rename does the same.

    Raises
    ------
    OSError
        If the kernel or file system cannot exchange the two folders.
    """
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        os.rename(src, dst)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_EXCHANGE)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot exchange {src} and {dst}: {os.strerror(err or errno.EIO)}")
