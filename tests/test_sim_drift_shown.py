"""``--drift random:K`` says what it drew: the header names each rank's drift, the one the run used."""

from __future__ import annotations

import contextlib
import io

from prefill_delayer.cli import main
from prefill_delayer.sim import Lengths, LongPrompt


def test_the_header_names_the_drift_the_run_drew() -> None:
    for seed in (0, 1, 7):
        recipe = LongPrompt(concurrency=8, prompt=Lengths.parse("20000", "--prompt-tokens"),
                            output=Lengths.parse("10", "--output-tokens"), drift=("random", 3))
        source = recipe.start_source(seed)
        source.bind(4, 4096)  # type: ignore[attr-defined]
        used = [o // 4096 for o in source._offsets]  # type: ignore[attr-defined]
        assert recipe.drawn_drift(4, seed) == used
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["simulate", "--workload", "long-prompt", "--concurrency", "8", "--prompt-tokens", "20000",
                       "--output-tokens", "10", "--drift", "random:3", "--passes", "20", "--dp-size", "4",
                       "--chunked-prefill-size", "4096", "--seed", str(seed)])
        assert rc == 0
        assert f"drift random:3 chunks (drew {','.join(map(str, used))}) (seed {seed})" in out.getvalue()
    fixed = LongPrompt(concurrency=2, prompt=Lengths.parse("100", "p"), output=Lengths.parse("1", "o"), drift=(1, 0))
    assert fixed.drawn_drift(2, 0) is None
