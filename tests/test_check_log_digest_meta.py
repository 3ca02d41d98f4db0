"""A node's digest whose meta.json is damaged below its top level, field by field: every field deleted, given a value
of the wrong type, or given a negative number is one line naming the digest and the field (exit 2), never a traceback
and never a number taken as it comes (``stats.passes = -5`` printed ``rank 0: -5 passes``).

Two kinds of change are no damage, and the merge must take them without a traceback: an entry of a table of counts
left out (a reason no pass gave), and a change to a log header that the log reader itself accepts (a field it does not
read, a negative start time): the digest keeps the header its log had.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from decision_log_harness import check_log, pass_dicts, write_inprocess_logs, write_seed_unbounded_logs
from prefill_delayer.conformance.checks import LogStats

# The tables of counts (an entry left out is a count of 0): a rank's stats' Counters, and the digest's counts.
COUNTS = {f.name for f in dataclasses.fields(LogStats) if f.type == "Counter"} | {"counts"}
Path_ = tuple[Any, ...]  # keys and indices from meta.json's top


def _logs(folder: Path) -> Path:
    """Two runs, one after another (two sessions): the seed's, with violations (findings, counts), whose rank 0 failed
    pass 6 and did not log pass 9 (a fail record, a gap); then a hardened one, whose delay runs end (delay_runs)."""
    write_seed_unbounded_logs(folder)
    path = folder / "rank0.jsonl"
    lines = path.read_text().splitlines()
    before = pass_dicts(path)[5]["before"]
    fail = {"kind": "fail", "rank": 0, "pass": 6, "error": "PeerInputError", "message": "a peer's row is invalid",
            "before": before}
    kept = [x for x in lines if not x.startswith(("[6,", "[9,"))]
    path.write_text("\n".join([*kept[:6], json.dumps(fail), *kept[6:]]) + "\n")
    write_inprocess_logs(folder / "later", world=2, passes=12)
    for p in (folder / "later").iterdir():
        p.rename(folder / f"{p.stem}.later.jsonl")
    (folder / "later").rmdir()
    return folder


@pytest.fixture(scope="module")
def digest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("digest")
    path = folder / "n.digest"
    rc, out, err = check_log(str(_logs(folder / "logs")), "--digest", str(path))
    assert rc == 1, out + err
    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read("meta.json"))
    first = meta["sessions"][0]["ranks"][0]
    assert len(meta["sessions"]) == 2 and first["fails"] and first["stats"]["gaps"] and meta["sessions"][0]["findings"]
    assert meta["counts"] and meta["sessions"][1]["ranks"][0]["stats"]["delay_runs"], meta
    return path, meta


def _leaves(o: Any, at: Path_ = (), alike: Path_ = (), seen: Any = None) -> Iterator[Path_]:
    """Every place of ``o`` that holds a scalar or an empty container; of places alike (the same keys, and indices into
    lists whose elements are all of one type: every rank's header, every name of a list of names), the first only.
    The elements of a list of mixed types (a fail record's) are each a place of their own."""
    seen = set() if seen is None else seen
    items = list(o.items()) if isinstance(o, dict) else list(enumerate(o)) if isinstance(o, list) else []
    if not items and alike not in seen:
        seen.add(alike)
        yield at
    one_type = isinstance(o, list) and len({type(x) for x in o}) == 1
    for k, v in items:
        yield from _leaves(v, (*at, k), (*alike, "*" if one_type else k), seen)


def _shown(at: Path_) -> str:
    """A place as the merge's message names it: ``sessions[0].ranks[1].stats.passes``, ``stats.reasons["delay"]``."""
    out = ""
    for parent, k in zip((None, *at), at):
        out += f"[{k}]" if isinstance(k, int) else f"[{json.dumps(k)}]" if parent in COUNTS else f".{k}"
    return out.lstrip(".")


def _wrong(v: Any) -> Any:
    """A value of another type than ``v``'s, as damage would leave it."""
    if isinstance(v, bool) or v is None:
        return "x"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return 7
    return [] if isinstance(v, dict) else {}


def _mutations(meta: dict[str, Any]) -> Iterator[tuple[str, Path_, Any]]:
    """(what, place, new value or ``...`` for left out) for every leaf: left out (a field of an object), of the wrong
    type, a negative number."""
    for at in _leaves(meta):
        v = _get(meta, at)
        if at and isinstance(at[-1], str):
            yield "left out", at, ...
        yield "wrong type", at, _wrong(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            yield "negative", at, -5


def _get(o: Any, at: Path_) -> Any:
    for k in at:
        o = o[k]
    return o


def _changed(meta: dict[str, Any], at: Path_, new: Any) -> dict[str, Any]:
    out = copy.deepcopy(meta)
    parent = _get(out, at[:-1])
    if new is ...:
        del parent[at[-1]]
    else:
        parent[at[-1]] = new
    return out


def _header_accepts(meta: dict[str, Any], at: Path_, folder: Path) -> bool:
    """Whether check-log takes the (changed) header at ``at`` as the first line of a log: the digest holds it as is."""
    from prefill_delayer.conformance.checks import build_sessions
    from prefill_delayer.conformance.logread import LogError
    from prefill_delayer.conformance.stream import scan_files

    log = folder / "rank0.jsonl"
    log.write_text(json.dumps(_get(meta, at[:at.index("header") + 1])) + "\n")
    try:
        build_sessions(scan_files([log])[0], own_profile=True)
    except LogError:
        return False
    return True


def test_every_field_of_a_digests_meta_damaged_is_one_line_naming_the_digest_and_the_field(
        digest: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, meta = digest
    members = {}
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist() if n != "meta.json"}
    bad = tmp_path / "bad.digest"
    tried, escaped = 0, []
    for what, at, new in _mutations(meta):
        changed = _changed(meta, at, new)
        with zipfile.ZipFile(bad, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
            z.writestr("meta.json", json.dumps(changed))
        tried += 1
        where = _shown(at)
        try:
            rc, out, err = check_log("--merge", str(bad))
        except Exception as exc:  # noqa: BLE001 - what escaped is what this test counts
            escaped.append(f"{where} {what}: {type(exc).__name__}: {exc}")
            continue
        in_header = "header" in at
        no_damage = (what == "left out" and len(at) > 1 and at[-2] in COUNTS) or (in_header and _header_accepts(changed, at, tmp_path))
        if no_damage:
            ok = rc in (0, 1) and err == ""
        else:
            named = _shown(at[:at.index("header") + 1]) if in_header else where
            says = "not a check-log digest" if at == ("tool",) else "a damaged check-log digest"  # another tool's
            ok = (rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
                  and err.startswith(f"prefill-delayer check-log: {bad}: {says} (meta.json {named}"))
        if not ok:
            escaped.append(f"{where} {what}: exit {rc}: {(err.strip().splitlines() or [''])[-1][:300]}")
    assert tried > 150
    assert not escaped, f"{len(escaped)} of {tried}:\n" + "\n".join(escaped)


def test_a_fail_record_naming_a_file_the_rank_does_not_have_is_damage(digest: tuple[Path, dict[str, Any]],
                                                                      tmp_path: Path) -> None:
    """A fail record's place is an index into its rank's files: one past them was taken as it came (exit 1)."""
    from prefill_delayer.conformance.digest import FAIL_FIELDS

    path, meta = digest
    changed = copy.deepcopy(meta)
    rank = changed["sessions"][0]["ranks"][0]
    rank["fails"][0][FAIL_FIELDS.index("fi")] = len(rank["files"])
    bad = tmp_path / "bad.digest"
    shutil.copy(path, tmp_path / "src.digest")
    with zipfile.ZipFile(tmp_path / "src.digest") as src, zipfile.ZipFile(bad, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, json.dumps(changed) if name == "meta.json" else src.read(name))
    rc, out, err = check_log("--merge", str(bad))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{bad}: a damaged check-log digest (meta.json sessions[0].ranks[0].fails[0]: " in err, err
