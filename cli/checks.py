"""Option checks shared by the subcommands, for what argparse cannot check.

They run before any work starts (no proof, no file written), so a typo costs
a one-line message instead of minutes of Z3 followed by a traceback. Each
check returns the message, or ``None`` when the value is fine.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ..spec.config import MAX_QUEUE_MIN_RATIO, PARAMETER_BY_NAME, Config
from ..spec.errors import ConfigError
from ..files import out_dir_problem, out_file_problem
from ..spec.profiles import PROFILES, known_profile, resolve_profile

# Z3 takes its timeout as an unsigned 32-bit number of milliseconds.
MAX_TIMEOUT_MS = 2**32 - 1


def plain(x: float) -> str:
    """A number as a user would type it: 1048576, not 1.04858e+06; -1, not -1.0."""
    if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return str(x)


def positive_int_problem(option: str, value: int, high: Optional[int] = None) -> Optional[str]:
    if value >= 1 and (high is None or value <= high):
        return None
    wanted = f"an integer in [1, {high}]" if high is not None else "an integer >= 1"
    return f"{option} must be {wanted}, got {value}"


def queue_ratio_problem(value: Optional[float]) -> Optional[str]:
    """The range ``Config`` accepts for queue_min_ratio; None (the option not given) means every ratio."""
    if value is None or PARAMETER_BY_NAME["queue_min_ratio"].check(value):
        return None
    return f"--queue-min-ratio must be a number in (0, {plain(MAX_QUEUE_MIN_RATIO)}], got {plain(value)}"


def dp_size_problem(value: Optional[int]) -> Optional[str]:
    """None (the option not given) means every dp_size."""
    param = PARAMETER_BY_NAME["dp_size"]
    return None if value is None or param.check(value) else f"--dp-size must be an {param.valid}, got {value}"


def profiles_or_problem(names: Optional[list[str]]) -> tuple[list[str], Optional[str]]:
    """The canonical profiles to prove (default: all of them), or the message for an unknown name."""
    if not names:
        return list(PROFILES), None
    for name in names:
        if not known_profile(name):
            try:
                resolve_profile(name)
            except ConfigError as exc:
                return [], f"--profile: {exc}"
    return list(dict.fromkeys(resolve_profile(n) for n in names)), None


def prove_problem(args: Any) -> Optional[str]:
    """The first bad ``prove`` option; fills ``args.profile`` with canonical names when all are fine."""
    profiles, problem = profiles_or_problem(args.profile)
    checks = (
        problem,
        positive_int_problem("--timeout-ms", args.timeout_ms, MAX_TIMEOUT_MS),
        positive_int_problem("--jobs", args.jobs),
        queue_ratio_problem(args.queue_min_ratio),
        dp_size_problem(args.dp_size),
        out_file_problem("--json", args.json),
        out_dir_problem("--traces", args.traces),
    )
    first = next((c for c in checks if c is not None), None)
    if first is None:
        try:  # the layout prove starts from; any cross-field rule of Config, with its own message
            Config(dp_size=args.dp_size or 1, queue_min_ratio=args.queue_min_ratio)
        except ConfigError as exc:
            return str(exc)
        args.profile = profiles
    return first


def docs_problem(args: Any) -> Optional[str]:
    return out_dir_problem("--out", args.out)
