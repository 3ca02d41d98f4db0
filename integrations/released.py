"""Files out of an engine's release on the package registry, fetched once and cached: for parity with the released code.

``fetch_file(project, version, member, target)`` runs ``pip download
PROJECT==VERSION --no-deps`` into a temporary folder, takes the one ``member``
out of the wheel (a zip) or sdist (a tar) without extracting anything else, and
writes it to ``target`` atomically (a failed fetch leaves no partial file). The
cache is ``$PREFILL_DELAYER_CACHE``, else the XDG cache, else ``~/.cache``. An
engine's parity test calls it for the files whose code it runs; SGLang's releases
go through ``integrations.sglang.upstream``, which uses the same pieces.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Optional, Sequence

CACHE_ENV = "PREFILL_DELAYER_CACHE"
PIP_SOCKET_TIMEOUT_S = 30
PIP_TIMEOUT_S = 900.0  # the whole download; some engines' wheels are hundreds of MB


class ReleaseUnavailable(RuntimeError):
    """A release's file is neither cached nor obtainable from the package registry."""

    def __init__(self, project: str, version: str, member: str, target: Path, detail: str, shown: str = "") -> None:
        super().__init__(
            f"{shown or project} {version}: the package registry could not be reached or did not provide the release "
            f"({detail}). To work offline, pre-fill the cache: on a connected machine run "
            f"'python -m pip download {project}=={version} --no-deps', take {member} out of the archive "
            f"and put it at {target} (the cache is ${CACHE_ENV}, else $XDG_CACHE_HOME/prefill-delayer, "
            "else ~/.cache/prefill-delayer)."
        )
        self.version = version
        self.target = target


def cache_dir() -> Path:
    """Where fetched release files live: ``$PREFILL_DELAYER_CACHE``, else the XDG cache, else ``~/.cache``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "prefill-delayer"


def pip_command(project: str, version: str, dest: Path) -> list[str]:
    return [
        sys.executable, "-m", "pip", "download", f"{project}=={version}", "--no-deps", "--dest", str(dest),
        "--quiet", "--no-input", "--disable-pip-version-check", "--timeout", str(PIP_SOCKET_TIMEOUT_S),
    ]


def download(command: Sequence[str], dest: Path, unavailable: "Unavailable", timeout_s: float = PIP_TIMEOUT_S) -> Path:
    """Run ``command`` (a pip download into ``dest``); return the one archive it left there."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise unavailable(f"pip download did not finish within {timeout_s:g} s") from None
    except OSError as err:
        raise unavailable(f"pip could not be run: {err}") from err
    archives = sorted(p for p in dest.iterdir() if p.is_file())
    if done.returncode != 0 or len(archives) != 1:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:]) or f"{len(archives)} files downloaded"
        raise unavailable(f"pip download exited with {done.returncode}: {tail}")
    return archives[0]


def member_bytes(archive: Path, member: str, unavailable: "Unavailable") -> bytes:
    """The bytes of ``member`` in a wheel (zip) or an sdist (tar, where it sits one folder deeper)."""
    suffix = "/" + member
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n == member or n.endswith(suffix)]
            if names:
                return z.read(min(names, key=len))
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile() and (m.name == member or m.name.endswith(suffix))]
            if members:
                f = t.extractfile(min(members, key=lambda m: len(m.name)))
                assert f is not None
                return f.read()
    raise unavailable(f"{archive.name} has no {member}")


def write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix="." + target.name + ".", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide the cache from other users of a shared one
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


class Unavailable:
    """Builds the ``ReleaseUnavailable`` of one fetch from a detail (so the helpers above stay generic)."""

    def __init__(self, project: str, version: str, member: str, target: Path, cls: type = ReleaseUnavailable) -> None:
        self.project, self.version, self.member, self.target, self.cls = project, version, member, target, cls

    def __call__(self, detail: str) -> Exception:
        if self.cls is ReleaseUnavailable:
            return ReleaseUnavailable(self.project, self.version, self.member, self.target, detail)
        return self.cls(self.version, self.target, detail)  # type: ignore[no-any-return]


_lock = threading.Lock()


def fetch_files(project: str, version: str, members: Sequence[str], folder: Optional[Path] = None) -> dict[str, Path]:
    """Each of ``members`` of ``project==version``, cached under ``folder`` (default: the cache's ``project-version``).

    One download serves every member missing from the cache.
    """
    folder = folder if folder is not None else cache_dir() / f"{project}-{version}"
    targets = {m: folder / m for m in members}
    missing = [m for m, t in targets.items() if not t.is_file()]
    if missing:
        with _lock:
            missing = [m for m, t in targets.items() if not t.is_file()]
            if missing:
                with tempfile.TemporaryDirectory(prefix="prefill-delayer-pip-") as tmp:
                    first = Unavailable(project, version, missing[0], targets[missing[0]])
                    archive = download(pip_command(project, version, Path(tmp)), Path(tmp), first)
                    for m in missing:
                        write_atomically(targets[m], member_bytes(archive, m, Unavailable(project, version, m, targets[m])))
    return targets
