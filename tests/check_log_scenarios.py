"""The decision logs the suite checks, rebuilt by name, and check-log's findings on each in a canonical form.

``tests/test_check_log_pinned.py`` holds every scenario's canonical report
against ``tests/data/check_log_pinned.json``, which was written by the build
before the log's second format and the streaming check-log (issue 23): the
findings on every log the suite writes must not change. Each scenario is one of
the existing tests' logs (in-process ranks; the gloo tests write the same
lines), optionally edited as that test edits it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from decision_log_harness import check_log, edit_line, slot_full_inputs, write_inprocess_logs

PINNED = Path(__file__).parent / "data" / "check_log_pinned.json"


def _queue(rank: int, k: int) -> tuple:
    return True, 0.9, 100, 80, 1024, 10


def _two_runs(rank: int, k: int) -> tuple:
    return (False, 0.9, 0, 0, 0, 0) if k == 8 else (True, 0.9, 100, 80, 150, 10)


def _gate(folder: Path, profile: str, min_bs: int = 3, passes: int = 12, world: int = 2, fmt: Any = None) -> None:
    """The gate policy's gloo scenario of ``tests/test_gate_policy.py``, on in-process ranks."""
    from prefill_delayer.runtime import PolicyCore, run_ranks
    from prefill_delayer.spec.policies.prefill_decode_interval import GateConfig

    c = GateConfig(prefill_decode_interval=2, prefill_decode_interval_min_bs=min_bs, dp_size=world,
                   enable_dp_attention=True, profile=profile)

    def rank_main(rank: int, gather: Any) -> None:
        now = [0.0]
        core = PolicyCore(c, gather, clock=lambda: now[0], decision_log=_target(folder, fmt))
        extended = False
        for k in range(passes):
            now[0] = 0.01 * k
            bs = min_bs + rank if k < passes // 2 else min_bs - 1 + 2 * rank
            d = core.negotiate(bs, extended)
            core.finalize()
            extended = d.output_allow
        core.close()

    folder.mkdir(parents=True, exist_ok=True)
    run_ranks(world, rank_main)


def _target(folder: Path, fmt: Any) -> Any:
    if fmt is None:
        return folder
    from prefill_delayer.runtime.decision_log import DecisionLogOptions

    return DecisionLogOptions(folder, folder=True, **fmt)


def _logs(folder: Path, fmt: Any, **kw: Any) -> None:
    write_inprocess_logs(folder, **kw, **({"log_options": fmt} if fmt is not None else {}))


# name -> (write the logs into a folder (format options or None: the default), edit them or None, extra check-log args)
Scenario = tuple[Callable[[Path, Any], None], Any, tuple[str, ...]]


def _edit_first(name: str, pred: Callable[[dict], bool], change: Callable[[dict], None]) -> Callable[[Path], None]:
    return lambda folder: (edit_line(folder / name, lambda o: o["kind"] == "pass" and pred(o), change), None)[1]


def _drop(name: str, passes: set[int]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / name
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if json.loads(line).get("pass") not in passes))
    return edit


def _cut(name: str, keep: int) -> Callable[[Path], None]:
    """The last line cut to its first ``keep`` bytes (a crash mid-write)."""
    def edit(folder: Path) -> None:
        path = folder / name
        data = path.read_bytes()
        start = data.rindex(b"\n", 0, len(data) - 1) + 1
        path.write_bytes(data[: start + keep])
    return edit


def _restarted(folder: Path, fmt: Any) -> None:
    _logs(folder, fmt, world=2, passes=15)
    _logs(folder, fmt, world=2, passes=10)


def _rotated(folder: Path, fmt: Any) -> None:
    from prefill_delayer.runtime import PrefillDelayer, ServerArgs
    from prefill_delayer.runtime.decision_log import DecisionLogOptions

    folder.mkdir(parents=True, exist_ok=True)
    opts = DecisionLogOptions(folder / "r.jsonl", max_bytes=4000, backup_count=2, **(fmt or {}))
    sa = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5)
    d = PrefillDelayer(1, 1, None, sa, 5, 0.5, gather=lambda row: [list(row)], decision_log=opts, clock=_ticks())
    for k in range(60):
        d.negotiate(k % 3 != 0, 0.9)
        d.decision_log.flush()
    d.close()


def _ticks() -> Callable[[], float]:
    t = [0.0]

    def clock() -> float:
        t[0] += 0.25
        return t[0]
    return clock


def scenarios() -> dict[str, Scenario]:
    def clean4(f: Path, fmt: Any) -> None:
        _logs(f, fmt, world=4, passes=80, profile="hardened")

    out: dict[str, Scenario] = {}
    for profile in ("seed", "sglang-0.5.17", "sglang-0.5.19", "sglang-0.5.22", "hardened"):
        out[f"every-profile-{profile}"] = (lambda f, fmt, p=profile: _logs(f, fmt, world=2, passes=70, profile=p), None, ())
    out["clean-4"] = (clean4, None, ())
    out["seed-unbounded"] = (lambda f, fmt: _logs(f, fmt, world=2, passes=12, profile="seed", max_delay_passes=4,
                                                  inputs=slot_full_inputs, server_args={"enable_dp_attention": True}),
                             None, ("--traces", "{out}/traces"))
    out["seed-skew"] = (lambda f, fmt: _logs(f, fmt, world=4, passes=8, profile="seed", max_delay_passes=100, inputs=_queue,
                                             rates=[1.0, 1.0, 1.3, 1.3], skip=False,
                                             server_args={"enable_dp_attention": True, "prefill_delayer_queue_min_ratio": 0.5,
                                                          "prefill_delayer_max_delay_ms": 15.0}),
                        None, ("--traces", "{out}/traces"))
    out["two-runs"] = (lambda f, fmt: _logs(f, fmt, world=2, passes=16, profile="seed", max_delay_passes=3, inputs=_two_runs,
                                            server_args={"enable_dp_attention": True}), None, ("--traces", "{out}/traces"))
    out["gate-hardened"] = (lambda f, fmt: _gate(f, "pdi-hardened", fmt=fmt), None, ())
    out["gate-0.5.23"] = (lambda f, fmt: _gate(f, "pdi-0.5.23", fmt=fmt), None, ("--traces", "{out}/traces"))
    out["restarted"] = (_restarted, None, ())
    out["rotated"] = (_rotated, None, ())
    # The edits of tests/test_check_log.py (format 1 lines only).
    out["edited-decision"] = (clean4, _edit_first("rank1.jsonl", lambda o: o["pass"] > 20 and o["decision"]["output_reason"] == "no_wait",
                                                  lambda o: o["decision"].update(output_reason="wait_success")), ())
    edits = {
        "force-allow": (lambda o: o["decision"]["output_reason"] == "token_watermark", lambda o: o["decision"].update(output_reason="no_wait")),
        "none-allows": (lambda o: o["decision"]["input_estimation"] == "none" and o["pass"] > 30,
                        lambda o: o["decision"].update(output_allow=False, output_reason="delay")),
        "wait-count": (lambda o: o["decision"]["output_reason"] in ("wait_success", "wait_timeout"),
                       lambda o: o["decision"].update(wait_forward_passes=o["decision"]["wait_forward_passes"] + 1)),
        "wait-seconds": (lambda o: o["decision"]["wait_forward_passes"] > 0,
                         lambda o: o["decision"].update(wait_seconds=o["decision"]["wait_seconds"] * 2)),
        "next-state": (lambda o: o["decision"]["output_reason"] == "delay",
                       lambda o: o["after"].update(delayed_count=o["after"]["delayed_count"] + 1)),
        "row": (lambda o: o["rows"][0] == 1 and o["rows"][1] == 0, lambda o: o.update(token_usage=0.1)),
    }
    for name, (pred, change) in edits.items():
        out[f"edited-{name}"] = (clean4, _edit_first("rank0.jsonl", pred, change), ())
    out["edited-gaps"] = (clean4, _drop("rank2.jsonl", {30, 31, 32}), ())
    out["edited-cut"] = (clean4, _cut("rank2.jsonl", 60), ())
    return out


def _strip(text: str, root: Path) -> str:
    return text.replace(str(root) + "/", "").replace(str(root), "")


def canonical(data: dict[str, Any], rc: int, root: Path) -> dict[str, Any]:
    """What the pin holds: exit code, findings, counts, verdicts, the summary's numbers; paths relative to the logs."""
    def clean(x: Any) -> Any:
        if isinstance(x, str):
            return _strip(x, root)
        if isinstance(x, list):
            return [clean(v) for v in x]
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        return x

    sessions = []
    for s in data["sessions"]:
        sessions.append({k: s[k] for k in ("profile", "world_size", "ranks_logged", "passes", "passes_compared", "mixed_passes",
                                           "mixed_resolved", "disagreeing_passes")}
                        | {"ranks": [{k: r[k] for k in ("rank", "group_rank", "passes", "first_pass", "last_pass", "gaps", "failed",
                                                        "sets", "reasons", "delay_runs", "delay_runs_cut", "delay_run_open_at_end",
                                                        "longest_delay_run", "notes")} for r in s["ranks"]]})
    traces = [{k: t.get(k) for k in ("property", "pass", "passes", "why")} | {"written": bool(t.get("path"))}
              for t in data.get("traces") or []]
    return clean({
        "rc": rc, "result": data["result"], "violations": data["violations"], "checked": data["checked"],
        "checks": [{k: v[k] for k in ("category", "property", "status", "violations", "known_defect", "why")} for v in data["checks"]],
        "findings": data["findings"], "findings_counts": data["findings_counts"], "sessions": sessions,
        "decisions_by_reason": data["decisions_by_reason"], "delay_run_lengths": data["delay_run_lengths"],
        "wait_seconds": data["wait_seconds"], "mixed_waits_ended": data["mixed_waits_ended"], "notes": data["notes"],
        "traces": traces,
    })


V1 = {"format": 1}


def run_scenario(name: str, root: Path, fmt: Any = V1, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Write scenario ``name``'s logs under ``root`` (format options ``fmt``), edit them, check them: the canonical report."""
    write, edit, args = scenarios()[name]
    logs = root / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    write(logs, fmt)
    if edit is not None:
        edit(logs)
    out = root / "out"
    out.mkdir(exist_ok=True)
    argv = [str(logs), *(a.format(out=out) for a in args), *extra, "--json", str(out / "r.json")]
    rc, stdout, stderr = check_log(*argv)
    assert rc in (0, 1), stdout + stderr
    return canonical(json.loads((out / "r.json").read_text()), rc, logs)
