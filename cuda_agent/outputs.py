"""The output directory: checked before a search, written all at once after it.

A run can take half an hour; an output path it cannot write into (under a file, in /proc, on a
read-only file system) must be found before the search, not after it. Writing goes through
temporary files renamed into place, so a run that fails while writing leaves nothing
half-written: a new directory appears whole or not at all, and in an existing one each file is
replaced whole, the report last. The temporaries are named after the writing process
(`tempfiles.py`): a run killed while writing leaves them, and the next run that writes there
removes them (never those of a run still going). Files get the user's umask, as `open()` gives.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import tempfiles
from .errors import OutputError


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def check_out_dir(out: str | Path) -> None:
    """Raise `OutputError` (one line) unless files can be written into `out`: the directory
    itself if it exists, else its nearest existing ancestor (where it would be created). A
    probe file is created and removed there: permissions alone miss read-only file systems,
    /proc and the like."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output directory {out}: a file of that name exists")
    where = _nearest_existing(out.absolute())
    if not where.is_dir():
        raise OutputError(f"output directory {out}: {where} is a file, not a directory")
    try:
        fd, probe = tempfiles.create(where)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"output directory {out}: cannot write in {where} "
                          f"({exc.strerror or exc})") from None
    _sweep(out)


def _sweep(out: Path) -> None:
    """Remove what killed runs left where this one writes: temporary files in `out`, a
    temporary directory beside it."""
    for folder in (out, out.absolute().parent):
        tempfiles.sweep(folder)


def write_files(out: str | Path, files: dict[str, str], remove: tuple[str, ...] = ()) -> dict[str, Path]:
    """Write `files` (name -> text) into `out` in the order given, and delete the `remove` names
    there (files of an earlier run that this one does not replace). Raises `OutputError`."""
    out = Path(out)
    try:
        _sweep(out)
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = tempfiles.make_dir(out.parent)
            try:
                for name, text in files.items():
                    (tmp / name).write_text(text)
                os.rename(tmp, out)  # the whole directory appears at once
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        else:
            temps: dict[str, Path] = {}
            try:
                for name, text in files.items():
                    fd, temps[name] = tempfiles.create(out, suffix=f".{name}")
                    with os.fdopen(fd, "w") as f:
                        f.write(text)
                for name in remove:
                    (out / name).unlink(missing_ok=True)
                for name, path in temps.items():
                    os.replace(path, out / name)
            finally:
                for path in temps.values():
                    path.unlink(missing_ok=True)
    except OSError as exc:
        raise OutputError(f"could not write {out}: {exc.strerror or exc}") from None
    return {name: out / name for name in files}
