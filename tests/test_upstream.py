"""``runtime._upstream`` without the registry: the release cache, its failures, and the loader's stubs.

pip is replaced by a small script that writes (or fails to write) an archive,
and the "releases" loaded here are small files written into a temporary cache,
so these tests run offline. The real releases are run by tests/test_releases.py.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from prefill_delayer.integrations.sglang import release_stubs as stubs
from prefill_delayer.integrations import released
from prefill_delayer.integrations.sglang import upstream as up
from prefill_delayer.runtime.gather import import_torch

SOURCE = b"class PrefillDelayer:\n    pass\n"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(up.CACHE_ENV, str(root))
    return root


def _fake_pip(monkeypatch: pytest.MonkeyPatch, body: str) -> list[str]:
    """Replace pip by ``python -c body`` run with argv [dest, version]; returns the list of versions asked for."""
    asked: list[str] = []

    def command(version: str, dest: Path) -> list[str]:
        asked.append(version)
        return [sys.executable, "-c", textwrap.dedent(body), str(dest), version]

    monkeypatch.setattr(up, "_pip_command", command)
    return asked


WRITE_WHEEL = f"""
    import sys, zipfile
    with zipfile.ZipFile(sys.argv[1] + "/sglang-" + sys.argv[2] + "-py3-none-any.whl", "w") as z:
        z.writestr("{up.MEMBER}", {SOURCE!r})
        z.writestr("sglang/other.py", "x = 1")
"""


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


# ----- versions and the cache's place ----------------------------------------------------------


@pytest.mark.parametrize("bad", ["0.5.13", "0.5.24", "sglang-0.5.16", "seed", 16, None])
def test_only_known_releases_are_accepted(bad: Any, cache: Path) -> None:
    with pytest.raises(ValueError, match="unknown SGLang release"):
        up.release_source(bad)
    with pytest.raises(ValueError, match="unknown SGLang release"):
        up.load_release(bad)
    assert _files(cache) == []


def test_the_cache_lives_outside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(up.CACHE_ENV, str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert up.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv(up.CACHE_ENV)
    assert up.cache_dir() == tmp_path / "xdg" / "prefill-delayer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert up.cache_dir() == tmp_path / "home" / ".cache" / "prefill-delayer"


# ----- fetching ----------------------------------------------------------------------------------


def test_a_fetch_keeps_only_the_one_file_and_happens_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _fake_pip(monkeypatch, WRITE_WHEEL)
    path = up.release_source("0.5.16")
    assert path == cache / "sglang-0.5.16" / "prefill_delayer.py"
    assert path.read_bytes() == SOURCE
    assert _files(cache) == ["sglang-0.5.16/prefill_delayer.py"]
    assert up.release_source("0.5.16") == path
    assert asked == ["0.5.16"]


def test_an_sdist_is_read_too(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pip(monkeypatch, f"""
        import io, sys, tarfile
        with tarfile.open(sys.argv[1] + "/sglang-" + sys.argv[2] + ".tar.gz", "w:gz") as t:
            data = {SOURCE!r}
            info = tarfile.TarInfo("sglang-" + sys.argv[2] + "/python/{up.MEMBER}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    """)
    assert up.release_source("0.5.22").read_bytes() == SOURCE


def test_an_unreachable_registry_says_how_to_fill_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pip(monkeypatch, """
        import sys
        print("ERROR: Could not find a version that satisfies the requirement (network is unreachable)", file=sys.stderr)
        sys.exit(1)
    """)
    with pytest.raises(up.ReleaseUnavailable) as info:
        up.release_source("0.5.19")
    message = str(info.value)
    assert "package registry could not be reached" in message
    assert "network is unreachable" in message  # pip's own reason
    assert "pip download sglang==0.5.19 --no-deps" in message
    assert str(cache / "sglang-0.5.19" / "prefill_delayer.py") in message
    assert info.value.version == "0.5.19"
    assert _files(cache) == []


def test_an_archive_without_the_file_leaves_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pip(monkeypatch, """
        import sys, zipfile
        with zipfile.ZipFile(sys.argv[1] + "/sglang.whl", "w") as z:
            z.writestr("sglang/other.py", "x = 1")
    """)
    with pytest.raises(up.ReleaseUnavailable, match="has no sglang/srt/managers/prefill_delayer.py"):
        up.release_source("0.5.17")
    assert _files(cache) == []


def test_a_hung_pip_is_stopped(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pip(monkeypatch, "import time; time.sleep(30)")
    monkeypatch.setattr(up, "PIP_TIMEOUT_S", 0.5)
    with pytest.raises(up.ReleaseUnavailable, match="did not finish within 0.5 s"):
        up.release_source("0.5.18")
    assert _files(cache) == []


def test_a_failed_write_leaves_no_partial_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pip(monkeypatch, WRITE_WHEEL)

    def broken_replace(src: str, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(released.os, "replace", broken_replace)  # the cache writes through integrations.released
    with pytest.raises(OSError, match="disk full"):
        up.release_source("0.5.20")
    assert _files(cache) == []


def test_pip_is_asked_quietly_and_with_a_timeout() -> None:
    cmd = up._pip_command("0.5.16", Path("/dest"))
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "sglang==0.5.16" in cmd and "--no-deps" in cmd and "--quiet" in cmd and "--timeout" in cmd


# ----- loading -------------------------------------------------------------------------------------

# A stand-in for a release's file, using every import a 0.5.21 release takes.
FAKE_0_5_21 = """
import time
import torch
from sglang.srt.distributed.utils import all_gather_single
from sglang.srt.environ import envs
from sglang.srt.runtime_context import get_parallel, get_schedule
from sglang.srt.utils import get_bool_env_var

LOADED_AT = time.perf_counter()

def now():
    return time.perf_counter()

def gather_single(row, width, group):
    out = torch.empty(width, dtype=torch.int64)
    all_gather_single(out, torch.tensor(row, dtype=torch.int64), group=group)
    return out.tolist()

def gather_into_tensor(row, width, group):
    out = torch.empty(width, dtype=torch.int64)
    torch.distributed.all_gather_into_tensor(out, torch.tensor(row, dtype=torch.int64), group=group)
    return out.tolist()
"""


def _cached(cache: Path, version: str, source: str) -> None:
    path = cache / f"sglang-{version}" / "prefill_delayer.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)


def test_a_load_serves_the_stubs_clock_and_context_and_leaves_no_trace(cache: Path) -> None:
    _cached(cache, "0.5.21", FAKE_0_5_21)
    torch, dist = import_torch()
    real_collective = dist.all_gather_into_tensor
    before = set(sys.modules)
    t = [7.0]
    parallel, schedule = object(), object()
    module = up.load_release("0.5.21", clock=lambda: t[0], parallel=parallel, schedule=schedule)
    assert set(sys.modules) == before  # no stub, no module name left behind
    assert module.LOADED_AT == 7.0
    t[0] = 8.5
    assert module.now() == 8.5
    assert module.get_parallel() is parallel and module.get_schedule() is schedule
    assert module.get_bool_env_var("PREFILL_DELAYER_TEST_UNSET_FLAG") is False
    # A gather callable as the group: this rank's row goes in, every row comes back flattened.
    seen: list[list[int]] = []
    assert module.gather_single([1, 2], 4, lambda row: seen.append(row) or [row, [3, 4]]) == [1, 2, 3, 4]
    assert module.gather_into_tensor([5, 6], 4, lambda row: [[0, 0], row]) == [0, 0, 5, 6]
    assert seen == [[1, 2]]
    with pytest.raises(RuntimeError, match="gather returned 2 values, the release's buffer holds 4"):
        module.gather_single([1, 2], 4, lambda row: [row])
    # Patched for that module only: the real torch is untouched.
    assert dist.all_gather_into_tensor is real_collective and torch.distributed is dist
    assert module.torch is not torch and module.torch.int64 is torch.int64


def test_without_a_context_the_stub_says_what_to_pass(cache: Path) -> None:
    _cached(cache, "0.5.21", FAKE_0_5_21)
    module = up.load_release("0.5.21")
    assert isinstance(module.LOADED_AT, float)  # the real clock
    with pytest.raises(RuntimeError, match="pass parallel= to load_release"):
        module.get_parallel()


def test_a_real_group_goes_to_the_real_collective() -> None:
    torch, dist = import_torch()
    calls: list[Any] = []
    collective = stubs.routed(lambda out, inp, group=None, **kw: calls.append(group), torch, dist)
    out, row = torch.zeros(2, dtype=torch.int64), torch.tensor([1, 2])
    group = object()  # not callable: a process group stands here
    collective(out, row, group=group)
    collective(out, row)  # the default group
    assert calls == [group, None]


def test_imports_other_than_the_release_s_own_fail_at_load(cache: Path) -> None:
    _cached(cache, "0.5.16", "from sglang.srt.runtime_context import get_parallel\n")
    with pytest.raises(ImportError):
        up.load_release("0.5.16")  # 0.5.16 takes nothing from runtime_context
    _cached(cache, "0.5.17", "from sglang.srt.managers.io_struct import Req\n")
    with pytest.raises(ImportError, match="does not stub"):
        up.load_release("0.5.17")
    _cached(cache, "0.5.22", "from sglang.srt.environ import envs\n")  # 0.5.22 imports more than this
    with pytest.raises(RuntimeError, match="the stubs expect"):
        up.load_release("0.5.22")


def test_release_imports_follow_the_releases() -> None:
    assert set(stubs.release_imports("0.5.16")) == {"sglang.srt.environ", "sglang.srt.utils"}
    assert stubs.release_imports("0.5.18")["sglang.srt.runtime_context"] == ("get_parallel",)
    assert stubs.release_imports("0.5.19")["sglang.srt.runtime_context"] == ("get_parallel", "get_schedule")
    assert "sglang.srt.distributed.utils" not in stubs.release_imports("0.5.20")
    assert stubs.release_imports("0.5.23")["sglang.srt.distributed.utils"] == ("all_gather_single",)


def test_importing_the_runtime_does_not_import_this() -> None:
    import subprocess

    code = "import sys, prefill_delayer.runtime; print(sorted(m for m in sys.modules if m.endswith('sglang.upstream') or m.endswith('release_stubs')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_importing_this_does_not_import_torch() -> None:
    import subprocess

    code = "import sys, prefill_delayer.integrations.sglang.upstream; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
