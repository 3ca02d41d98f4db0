"""Option checks shared by the subcommands, for what argparse cannot check.

They run before any work starts (no proof, no file written), so a typo costs
a one-line message instead of minutes of Z3 followed by a traceback. Each
check returns the message, or ``None`` when the value is fine.
"""

from __future__ import annotations

from typing import Any, Optional

from ..files import Outputs
from ..workers import jobs_problem
from ..spec.config import MAX_WORLD_SIZE, plain
from ..spec.errors import ConfigError
from ..spec.registry import all_profiles, known_profile, policies, policy_of, resolve_profile

# Z3 takes its timeout as an unsigned 32-bit number of milliseconds.
MAX_TIMEOUT_MS = 2**32 - 1


def positive_int_problem(option: str, value: int, high: Optional[int] = None) -> Optional[str]:
    if value >= 1 and (high is None or value <= high):
        return None
    wanted = f"an integer in [1, {high}]" if high is not None else "an integer >= 1"
    return f"{option} must be {wanted}, got {value}"


def scope_options() -> list[Any]:
    """Every policy's ``prove`` options that pin a parameter, once each (by option name)."""
    seen: dict[str, Any] = {}
    for pol in policies():
        for opt in pol.proof.scope_options:
            seen.setdefault(opt.option, (pol, opt))
    return list(seen.values())


def scope_option_problem(pol: Any, opt: Any, value: Any) -> Optional[str]:
    """A pinned value the policy's parameter check accepts; None (the option not given) means every value."""
    param = next(p for p in pol.params if p.name == opt.param)
    if value is None or (param.check(value) and value is not None):
        return None
    return f"{opt.option} must be {opt.wanted}, got {plain(value)}"


def dp_size_problem(value: Optional[int]) -> Optional[str]:
    """None (the option not given) means every dp_size."""
    if value is None or (isinstance(value, int) and 1 <= value <= MAX_WORLD_SIZE):
        return None
    return f"--dp-size must be an integer in [1, {MAX_WORLD_SIZE}], got {value}"


def profiles_or_problem(names: Optional[list[str]]) -> tuple[list[str], Optional[str]]:
    """The canonical profiles to prove (default: all of them), or the message for an unknown name."""
    if not names:
        return list(all_profiles()), None
    for name in names:
        if not known_profile(name):
            try:
                resolve_profile(name)
            except ConfigError as exc:
                return [], f"--profile: {exc}"
    return list(dict.fromkeys(resolve_profile(n) for n in names)), None


def option_dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def prove_options(args: Any) -> dict[str, Any]:
    """``prove``'s scope options as the policies' ``scope_of`` takes them (empty: every value)."""
    options: dict[str, Any] = {}
    if args.dp_size is not None:
        options["dp_size"] = args.dp_size
    for _, opt in scope_options():
        value = getattr(args, option_dest(opt.option))
        if value is not None:
            options[opt.param] = opt.type(value)
    return options


def scope_unused_problem(args: Any, profiles: list[str]) -> Optional[str]:
    """A pinning option none of the profiles to prove has a parameter for would be dropped without a word."""
    pols = {policy_of(p).name: policy_of(p) for p in profiles}.values()
    for owner, opt in scope_options():
        if getattr(args, option_dest(opt.option)) is not None and not any(
                opt.option in (o.option for o in pol.proof.scope_options) for pol in pols):
            return (f"{opt.option} pins {owner.title}'s {opt.param}, which none of the profiles to prove has "
                    f"({', '.join(profiles)})")
    return None


def prove_problem(args: Any) -> Optional[str]:
    """The first bad ``prove`` option; fills ``args.profile`` with canonical names when all are fine."""
    profiles, problem = profiles_or_problem(args.profile)
    checks = [
        problem,
        positive_int_problem("--timeout-ms", args.timeout_ms, MAX_TIMEOUT_MS),
        jobs_problem("--jobs", args.jobs),
        *(scope_option_problem(pol, opt, getattr(args, option_dest(opt.option))) for pol, opt in scope_options()),
        dp_size_problem(args.dp_size),
        prove_outputs(args).problem(),
    ]
    first = next((c for c in checks if c is not None), None)
    if first is None and problem is None:
        first = scope_unused_problem(args, profiles)
    if first is None:
        # The layout prove starts from; any cross-field rule of each policy's configuration, with its own message.
        for pol in {policy_of(p).name: policy_of(p) for p in profiles}.values():
            try:
                pol.config_cls(dp_size=args.dp_size or 1, profile=pol.default_profile,
                               **{opt.param: getattr(args, option_dest(opt.option)) for opt in pol.proof.scope_options
                                  if getattr(args, option_dest(opt.option)) is not None})
            except ConfigError as exc:
                return str(exc)
        args.profiles_given, args.profile = args.profile, profiles
    return first


def prove_outputs(args: Any) -> Outputs:
    """``prove``'s outputs: the report and the traces' folder, new or empty (it reads no file)."""
    return Outputs().file("--json", args.json).folder("--traces", args.traces, empty=True)


def releases_note(given: Optional[list[str]]) -> list[str]:
    """One line per release name given that ``prove`` checks under another name (its profile's column)."""
    lines = []
    for name in dict.fromkeys(given or ()):
        profile = resolve_profile(name)
        if profile != name:
            same = [a for a, p in policy_of(profile).release_aliases.items() if p == profile]
            lines.append(f"{name} is checked as profile {profile}, its column: one policy for {', '.join(same)}")
    return lines
