"""Workloads and request traces for the simulator: arrivals, lengths, and FILE:LINE errors."""

from __future__ import annotations

import math
import os
import threading

import pytest

from prefill_delayer.sim import Burst, Bursty, Lengths, LongPrompt, Mix, Poisson, load_trace
from prefill_delayer.sim.errors import SimInputError, TraceFileError


def arrivals(workload, until: float, seed: int = 0) -> list:
    src = workload.start_source(seed)
    src.bind(4, 1024)
    return src.due(until)


def test_poisson_rate_and_lengths():
    reqs = arrivals(Poisson(rate=5.0, prompt=Lengths(10, 20), output=Lengths(3, 3)), 400.0)
    assert abs(len(reqs) / 400.0 - 5.0) < 0.3
    assert all(10 <= r.prompt <= 20 and r.output == 3 for r in reqs)
    assert [r.arrival for r in reqs] == sorted(r.arrival for r in reqs)


def test_bursty_requests_come_in_bursts_at_the_average_rate():
    reqs = arrivals(Bursty(rate=6.0, burst=4, prompt=Lengths(5, 5), output=Lengths(1, 1)), 500.0)
    times: dict[float, int] = {}
    for r in reqs:
        times[r.arrival] = times.get(r.arrival, 0) + 1
    assert set(times.values()) == {4}
    assert abs(len(reqs) / 500.0 - 6.0) < 0.6


@pytest.mark.parametrize("workload, endless", [
    (Poisson(rate=5.0, prompt=Lengths(1, 1), output=Lengths(1, 1)), True),
    (Poisson(rate=5.0, prompt=Lengths(1, 1), output=Lengths(1, 1), stop=3.0), False),
    (Bursty(rate=5.0, burst=2, prompt=Lengths(1, 1), output=Lengths(1, 1)), True),
    (LongPrompt(concurrency=2, prompt=Lengths(1, 1), output=Lengths(1, 1)), True),
    (Burst(count=3, prompt=Lengths(1, 1), output=Lengths(1, 1)), False),
    (Mix((Burst(count=3, prompt=Lengths(1, 1), output=Lengths(1, 1)),
          Poisson(rate=5.0, prompt=Lengths(1, 1), output=Lengths(1, 1)))), True),
    (Mix((Burst(count=3, prompt=Lengths(1, 1), output=Lengths(1, 1)),)), False),
])
def test_a_workload_is_endless_where_its_requests_never_stop(workload, endless):
    """``endless``: what a run with no --duration reaches its pass cap on (``simulate`` bounds --passes by the memory
    their records take only there); a source that runs out has, as its last request shows."""
    from prefill_delayer.sim.workload import endless as is_endless

    assert is_endless(workload) is endless
    src = workload.start_source(0)
    src.bind(4, 1024)
    src.due(1000.0)
    assert (src.next_arrival() < math.inf or isinstance(workload, LongPrompt)) is endless


def test_next_arrival_is_seen_before_it_is_due():
    src = Poisson(rate=1.0, prompt=Lengths(1, 1), output=Lengths(1, 1)).start_source(3)
    t = src.next_arrival()
    assert 0 < t < math.inf
    assert src.due(t - 1e-9) == []
    assert len(src.due(t)) == 1


def test_mix_keeps_each_part_and_numbers_requests_once():
    wl = Mix((Burst(count=8, prompt=Lengths(64, 64), output=Lengths(2, 2)), Poisson(rate=2.0, prompt=Lengths(100, 100), output=Lengths(5, 5))))
    reqs = arrivals(wl, 50.0)
    assert sum(r.prompt == 64 for r in reqs) == 8 and all(r.arrival == 0.0 for r in reqs if r.prompt == 64)
    assert len({r.rid for r in reqs}) == len(reqs)


def test_closed_loop_sends_the_next_request_when_one_finishes():
    src = LongPrompt(concurrency=3, prompt=Lengths(500, 500), output=Lengths(2, 2)).start_source(0)
    src.bind(2, 256)
    first = src.due(0.0)
    assert len(first) == 3 and src.next_arrival() == math.inf
    src.finished(first[1], 7.5)
    nxt = src.due(7.5)
    assert len(nxt) == 1 and nxt[0].client == first[1].client and nxt[0].arrival == 7.5


@pytest.mark.parametrize(
    "text, lo, hi", [("5", 5, 5), ("3:9", 3, 9), (7, 7, 7)]
)
def test_lengths_parse(text, lo, hi):
    assert Lengths.parse(text) == Lengths(lo, hi)


@pytest.mark.parametrize("text", ["0", "-3", "9:3", "a", "1:2:3", "", "1.5"])
def test_lengths_refuse_nonsense(text):
    with pytest.raises(SimInputError, match="N or LO:HI"):
        Lengths.parse(text, "--prompt-tokens")


@pytest.mark.parametrize("rate", [0, -1.0, math.inf, math.nan])
def test_rates_must_be_positive(rate):
    with pytest.raises(SimInputError, match="rate must be a finite number of requests per second > 0"):
        Poisson(rate=rate, prompt=Lengths(1, 1), output=Lengths(1, 1))
    with pytest.raises(SimInputError, match="rate must be"):
        Bursty(rate=rate, burst=2, prompt=Lengths(1, 1), output=Lengths(1, 1))


# ----- traces -------------------------------------------------------------------


def test_csv_trace_any_column_order_extra_columns_blank_lines(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,output_tokens,arrival,prompt_tokens\n\nb,7,10.0,200\na,5,10.5,100\n")
    trace = load_trace(str(path))
    # Shifted to start at 0; each row keeps its line.
    assert trace.rows == ((0.0, 200, 7), (0.5, 100, 5))
    assert trace.lines == (3, 4)


def test_a_trace_out_of_arrival_order_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,output_tokens,arrival,prompt_tokens\n\na,5,10.5,100\nb,7,10.0,200\n")
    with pytest.raises(SimInputError) as err:
        load_trace(str(path))
    assert str(err.value) == (f"{path}:4: arrival 10 s is earlier than line 3's 10.5 s: the requests must be listed in "
                              "arrival order (sort the trace by arrival)")


def test_jsonl_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival": 0, "prompt_tokens": 10, "output_tokens": 2}\n\n{"arrival": 1.25, "prompt_tokens": 3, "output_tokens": 1, "note": "x"}\n')
    assert load_trace(str(path)).rows == ((0.0, 10, 2), (1.25, 3, 1))


@pytest.mark.parametrize(
    "name, text, line, why",
    [
        ("a.csv", "arrival,prompt_tokens\n0,1\n", 1, "lacks output_tokens"),
        ("a.csv", "arrival,prompt_tokens,output_tokens\n0,10,2\n1,x,2\n", 3, "prompt_tokens must be an integer >= 1, got 'x'"),
        ("a.csv", "arrival,prompt_tokens,output_tokens\n0,10,2\n-1,10,2\n", 3, "arrival must be a finite number of seconds >= 0"),
        ("a.csv", "arrival,prompt_tokens,output_tokens\n0,10,0\n", 2, "output_tokens must be an integer >= 1, got '0'"),
        ("a.csv", "arrival,prompt_tokens,output_tokens\n0,10\n", 2, "2 fields, the header has 3"),
        ("a.csv", "arrival,prompt_tokens,output_tokens\nnan,10,2\n", 2, "arrival must be a finite number"),
        ("a.csv", "arrival,prompt_tokens,output_tokens\n", 1, "no requests in the trace"),
        ("a.csv", "\n\n", 1, "empty trace"),
        ("b.jsonl", '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1}\n{"arrival": 1, "prompt_tokens": 1\n', 2, "not JSON"),
        ("b.jsonl", '{"arrival": 0, "prompt_tokens": 1}\n', 1, "missing output_tokens"),
        ("b.jsonl", '[1, 2, 3]\n', 1, "expected a JSON object"),
        ("b.jsonl", '{"arrival": 0, "prompt_tokens": 2.5, "output_tokens": 1}\n', 1, "prompt_tokens must be an integer >= 1, got 2.5"),
        ("b.jsonl", '{"arrival": true, "prompt_tokens": 2, "output_tokens": 1}\n', 1, "arrival must be a finite number"),
    ],
)
def test_malformed_traces_name_file_and_line(tmp_path, name, text, line, why):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFileError) as err:
        load_trace(str(path))
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert why in str(err.value)


def test_a_missing_or_binary_trace(tmp_path):
    with pytest.raises(TraceFileError, match=r"nope\.csv: cannot read the trace"):
        load_trace(str(tmp_path / "nope.csv"))
    bad = tmp_path / "bin.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceFileError, match=r"bin\.csv:1: not UTF-8"):
        load_trace(str(bad))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_a_trace_from_a_device_is_refused_not_read_without_end():
    """``/dev/zero`` never ends: read whole, it took every byte of memory. Run in a child with its heap capped, so
    that a reader that reads it again fails this test rather than the machine."""
    from test_cli_input import run_bounded

    done = run_bounded(["simulate", "--workload", "trace", "--trace", "/dev/zero", "--no-progress"])
    assert (done.returncode, done.stdout) == (2, ""), done.stderr[-2000:]
    assert done.stderr == "prefill-delayer simulate: /dev/zero: cannot read the trace: a character device, not a file\n"


def test_a_trace_from_a_pipe_is_read(tmp_path):
    """``--trace <(zcat trace.csv.gz)``: a pipe is read as a file is."""
    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=("arrival,prompt_tokens,output_tokens\n0,200,7\n",))
    writer.start()
    trace = load_trace(str(fifo))
    writer.join(timeout=60)
    assert trace.rows == ((0.0, 200, 7),)


@pytest.mark.parametrize("prompt, drift, flag, said", [
    (Lengths(2000, 2000), (0, 2), "0,2", "a rank's first request would start 2 chunks into its prompt, and a 2,000-token "
     "prompt has 2 chunks of at most 1,024 tokens (chunked_prefill_size): nothing would be left to prefill; at most 1"),
    (Lengths(500, 4000), ("random", 1), "random:1", "a rank's first request may start up to 1 chunk into its prompt, and "
     "the shortest prompt, 500 tokens, has 1 chunk of at most 1,024 tokens (chunked_prefill_size): nothing would be "
     "left to prefill; at most 0"),
])
def test_a_drift_past_the_prompt_built_in_python_is_refused_as_the_command_refuses_it(capsys, prompt, drift, flag, said):
    """Built in Python (``simulate --drift`` refused it), such a drift ran cut to the prompt's end without a word: each
    rank's first request one token long. The run refuses it, in the command's words with the Python API's names."""
    from prefill_delayer.cli import main as cli
    from prefill_delayer.sim import SimConfig, Variant, simulate

    workload = LongPrompt(concurrency=4, prompt=prompt, output=Lengths(1, 1), drift=drift)
    config = SimConfig(dp_size=2, max_running_requests=8, chunked_prefill_size=1024, passes=20)
    with pytest.raises(ValueError) as raised:
        simulate(config, [Variant.of("off")], workload)
    assert str(raised.value) == f"drift={drift!r}: {said}"
    assert cli(["simulate", "--workload", "long-prompt", "--concurrency", "4", "--prompt-tokens", f"{prompt.lo}:{prompt.hi}",
                "--output-tokens", "1", "--dp-size", "2", "--max-running-requests", "8", "--chunked-prefill-size", "1024",
                "--passes", "20", "--profile", "off", "--drift", flag]) == 2
    err = capsys.readouterr().err
    assert err == f"prefill-delayer simulate: --drift {flag}: {said.replace('chunked_prefill_size', '--chunked-prefill-size')}\n"
