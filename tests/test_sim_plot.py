"""``simulate --plot``'s figure is legible: runs that draw the same curves are one line labelled ``a = b`` (not one
hidden under another), the other lines differ in style as well as colour, no legend covers a panel's data, and no
text is smaller than 10 px at the saved size."""

from __future__ import annotations

import json

import pytest

from prefill_delayer.cli import main as cli

# #32880 shortened: sglang-0.5.18 and hardened run alike here (the same delayer and tracker), the seed and off do not.
RUN = ["simulate", "--scenario", "32880", "--passes", "200", "--warmup", "0", "--dp-size", "4",
       "--profile", "seed", "--profile", "sglang-0.5.18", "--profile", "hardened", "--profile", "off"]
MIN_TEXT_PX = 10


@pytest.fixture
def drawn(tmp_path, monkeypatch, capsys):
    """Run ``RUN --plot``, keeping what the saved figure showed: its legends' entries and extents, the panels holding
    data, the lines of the throughput panel and the size of every text, all as drawn when it was saved."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    seen: dict = {}
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        save(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        legends = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend() is not None)]
        data = [a for a in fig.axes if a.lines or a.images or a.collections]
        seen.update(
            entries=[t.get_text() for leg in legends for t in leg.get_texts()],
            legend_boxes=[leg.get_window_extent(renderer) for leg in legends],
            data_boxes=[a.get_window_extent(renderer) for a in data],
            throughput_lines=[(line.get_label(), line.get_linestyle(), line.get_marker())
                              for line in next(a for a in fig.axes if "throughput" in a.get_title()).lines],
            text_px=[(t.get_text(), t.get_fontsize() * fig.dpi / 72) for t in fig.findobj(Text) if t.get_visible() and t.get_text()],
        )

    monkeypatch.setattr(Figure, "savefig", savefig)
    assert cli([*RUN, "--plot", str(tmp_path / "sim.png"), "--json", str(tmp_path / "sim.json")]) == 0
    capsys.readouterr()
    summaries = {r["name"]: r["summary"] for r in json.loads((tmp_path / "sim.json").read_text())["results"]}
    assert summaries["sglang-0.5.18"] == summaries["hardened"] != summaries["seed"]  # what the test is about
    assert (tmp_path / "sim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return seen


def test_identical_runs_are_one_line_labelled_as_identical(drawn):
    assert "sglang-0.5.18 = hardened" in drawn["entries"]
    assert "hardened" not in drawn["entries"] and "sglang-0.5.18" not in drawn["entries"]
    labels = [label for label, _, _ in drawn["throughput_lines"]]
    assert sorted(labels) == ["off", "seed", "sglang-0.5.18 = hardened"], labels
    styles = [(ls, marker) for _, ls, marker in drawn["throughput_lines"]]
    assert len(set(styles)) == len(styles), styles  # told apart where their colours overlap


def test_no_legend_covers_a_panel_with_data(drawn):
    assert drawn["legend_boxes"] and drawn["data_boxes"]
    for legend in drawn["legend_boxes"]:
        assert not any(legend.overlaps(panel) for panel in drawn["data_boxes"]), (legend, drawn["data_boxes"])


def test_text_is_readable_at_the_saved_size(drawn):
    small = [(text, px) for text, px in drawn["text_px"] if px < MIN_TEXT_PX]
    assert not small, small
