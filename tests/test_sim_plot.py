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


# A crowded figure, as a new user's first one: the seed and six profiles that run alike here (a long panel title, and
# a legend entry too wide for the legend to fit the figure unless wrapped), pdi and vllm-0.33.0 whose timelines show
# two reasons their bindings both colour green, and whose curves are alike while their timelines are not.
CROWDED = ["simulate", "--workload", "poisson", "--rate", "15", "--prompt-tokens", "1000:4000", "--output-tokens",
           "100:400", "--duration", "8", *(x for p in ("seed", "sglang-0.5.17", "sglang-0.5.19", "sglang-0.5.22",
                                                      "hardened", "lockstep", "lockstep-hardened", "pdi-0.5.23",
                                                      "pdi-hardened", "vllm-0.33.0") for x in ("--profile", p))]


def _one_line(text: str) -> str:
    return " ".join(text.split())


# pdi with its decode interval on, whose reasons its binding colours as the seed's (decode_interval red as delay,
# small_batch blue as wait_success, no_interval green as no_wait), and a figure title wider than the figure.
INTERVALS = ["simulate", "--workload", "poisson", "--rate", "15", "--prompt-tokens", "1000:4000", "--output-tokens",
             "100:400", "--duration", "10", "--profile", "seed", "--profile", "pdi-0.5.23", "--profile", "vllm-0.33.0",
             "--set", "prefill_decode_interval=3", "--set", "prefill_decode_interval_min_bs=4"]


def _draw(argv, folder):
    """Run ``argv --plot``, keeping, as drawn when saved: each titled panel's title, its extent and the panel's;
    the series' legend entries; the reasons' legend entries with their colours; every text's extent."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    seen: dict = {}
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        seen["texts"] = []  # the texts of the saved drawing alone, not of one made before to measure
        save(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        panels = [a for a in fig.axes if a.get_title() and "throughput" not in a.get_title()
                  and "running" not in a.get_title()]
        throughput = next(a for a in fig.axes if "throughput" in a.get_title())
        series = next(a.get_legend() for a in fig.axes if a.get_legend() is not None)
        seen.update(
            titles=[(a.get_title(), a.title.get_window_extent(renderer), a.get_window_extent(renderer)) for a in panels],
            figure_box=fig.bbox,
            lines=[_one_line(line.get_label()) for line in throughput.lines],
            series=[_one_line(t.get_text()) for t in series.get_texts()],
            reasons=[(t.get_text(), to_hex(h.get_facecolor()))
                     for leg in fig.legends for t, h in zip(leg.get_texts(), leg.legend_handles)],
        )

    draw = Text.draw

    def draw_text(text, renderer):  # every text as drawn: a tick label outside its axis' range is kept, not drawn
        draw(text, renderer)
        if text.get_visible() and text.get_text() and "texts" in seen:
            seen["texts"].append((text.get_text(), text.get_window_extent(renderer)))

    mp = pytest.MonkeyPatch()
    mp.setattr(Figure, "savefig", savefig)
    mp.setattr(Text, "draw", draw_text)
    try:
        path = folder / "sim.png"
        assert cli([*argv, "--plot", str(path)]) == 0
    finally:
        mp.undo()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return seen


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    return _draw(CROWDED, tmp_path_factory.mktemp("crowded"))


@pytest.fixture(scope="module")
def intervals(tmp_path_factory):
    return _draw(INTERVALS, tmp_path_factory.mktemp("intervals"))


def test_every_panel_title_fits_its_panel(crowded):
    names = [_one_line(t).split(" = ") for t, _, _ in crowded["titles"]]
    assert max(map(len, names)) >= 5, names  # what the test is about: a title of many names
    for text, title, panel in crowded["titles"]:
        assert title.x0 >= panel.x0 - 1 and title.x1 <= panel.x1 + 1, (text, title, panel)
        assert crowded["figure_box"].x0 <= title.x0 and title.x1 <= crowded["figure_box"].x1, text
    boxes = [title for _, title, _ in crowded["titles"]]
    assert not any(a.overlaps(b) for k, a in enumerate(boxes) for b in boxes[k + 1:]), crowded["titles"]


@pytest.mark.parametrize("figure", ["crowded", "intervals"])
def test_no_text_is_cut_off_at_the_figures_edges(figure, request):
    drawn = request.getfixturevalue(figure)
    # what the test is about: the series' legend's long entry; the figure's long title (the options)
    assert max(len(_one_line(text)) for text, _ in drawn["texts"]) > 80
    box = drawn["figure_box"]
    out = [(text, ext) for text, ext in drawn["texts"] if ext.x0 < box.x0 - 1 or ext.x1 > box.x1 + 1
           or ext.y0 < box.y0 - 1 or ext.y1 > box.y1 + 1]
    assert not out, out


@pytest.mark.parametrize("figure, alike", [("crowded", {"no_interval", "no_wait"}),
                                           ("intervals", {"no_interval", "no_wait", "decode_interval", "delay"})])
def test_every_reason_in_the_legend_has_its_own_colour(figure, alike, request):
    drawn = request.getfixturevalue(figure)
    reasons = dict(drawn["reasons"])
    assert len(reasons) == len(drawn["reasons"]), drawn["reasons"]  # each reason once
    assert alike <= set(reasons), reasons  # what the test is about: reasons their bindings colour alike
    colours = list(reasons.values())
    assert len(set(colours)) == len(colours), drawn["reasons"]
    assert reasons["no_wait"] == "#2ca02c"  # the colour most runs' bindings give it kept
    assert reasons.get("delay", "#d62728") == "#d62728"


def test_the_series_legend_groups_runs_as_the_panels_do(crowded):
    panels = list(dict.fromkeys(_one_line(t) for t, _, _ in crowded["titles"]))
    assert crowded["series"] == crowded["lines"] == panels, (crowded["series"], panels)
    assert {"pdi-0.5.23", "vllm-0.33.0"} <= {n for p in panels for n in p.split(" = ")}
    assert not any({"pdi-0.5.23", "vllm-0.33.0"} <= set(p.split(" = ")) for p in panels)  # their timelines differ


def test_reason_colours_never_collide():
    pytest.importorskip("matplotlib")
    from prefill_delayer.sim.plot import OWN_COLOURS, assign_colours

    wanted = {"delay": ["#d62728"], "decode_interval": ["#d62728"], "no_wait": ["#2ca02c"], "no_interval": ["#2CA02C"]}
    colours = assign_colours(["delay", "decode_interval", "no_wait", "no_interval"], lambda n: wanted[n])
    assert colours["delay"] == "#d62728" and colours["no_wait"] == "#2ca02c"  # first come keeps its colour
    assert len(set(colours.values())) == 4, colours
    for n in (3, 40, 200):  # past every palette: colours made up, still none alike and never a simulator's grey
        names = [*OWN_COLOURS, *(f"r{k}" for k in range(n))]
        colours = assign_colours(names, lambda name: [OWN_COLOURS.get(name, "#2ca02c")])
        assert len(set(colours.values())) == len(names), colours
        assert colours == assign_colours(names, lambda name: [OWN_COLOURS.get(name, "#2ca02c")])  # deterministic


def test_the_suite_colour_bar_reads_in_the_cells_units(tmp_path, monkeypatch):
    """The heatmap's cells read percent of the bound (0-100): its colour bar does too, and is labelled."""
    pytest.importorskip("matplotlib")
    from types import SimpleNamespace

    from matplotlib.figure import Figure

    from prefill_delayer.sim import suite_run

    fractions = {("a", "w1"): (1.0, 0.5, 0.25), ("a", "w2"): (0.9, None, 0.1), ("b", "w1"): (0.75, 0.05, 1.0)}
    rows = [SimpleNamespace(policy=p, workload=w, fractions=lambda f=f: f) for (p, w), f in fractions.items()]
    cases = [SimpleNamespace(spec=SimpleNamespace(name=w)) for w in ("w1", "w2")]
    seen: list = []
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        save(fig, *args, **kwargs)
        for ax in fig.axes:
            for im in ax.images:
                bar = im.colorbar
                seen.append(dict(
                    cells=[(t.get_text(), im.get_array()[round(t.get_position()[1]), round(t.get_position()[0])])
                           for t in ax.texts],
                    limits=(im.norm.vmin, im.norm.vmax),
                    label=bar.ax.get_ylabel(),
                    ticks=[t.get_text() for t in bar.ax.get_yticklabels()]))

    monkeypatch.setattr(Figure, "savefig", savefig)
    suite_run.plot(cases, rows, str(tmp_path / "suite.png"), "suite test")
    assert (tmp_path / "suite.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(seen) == 3
    for heatmap in seen:
        assert heatmap["limits"] == (0, 100) and "%" in heatmap["label"], heatmap
        assert heatmap["ticks"] == ["0", "25", "50", "75", "100"], heatmap
        for text, value in heatmap["cells"]:
            if text != "-":  # a cell's number is the value its colour is read against on the bar
                assert float(text) == pytest.approx(float(value), abs=0.5), heatmap


def test_the_suite_heatmap_cells_keep_their_colour_in_the_saved_file(tmp_path, monkeypatch):
    """The PNG is re-saved with a palette to keep it small: every cell must keep the colour its value has on the colour
    bar. On a continuous scale the palette banded it (a cell at 25% came out brown, one at 23% redder than one at
    16%)."""
    pytest.importorskip("matplotlib")
    from types import SimpleNamespace

    from matplotlib.figure import Figure
    from PIL import Image

    from prefill_delayer.sim import suite_run

    names = [f"w{j}" for j in range(21)]  # every 5% step of the scale, and some between
    rows = [SimpleNamespace(policy=p, workload=w, fractions=lambda f=(j / 20, (j + 0.5) / 21, (20 - j) / 20): f)
            for p in ("a", "b") for j, w in enumerate(names)]
    cases = [SimpleNamespace(spec=SimpleNamespace(name=w)) for w in names]
    expected: list = []
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        save(fig, *args, **kwargs)
        height = fig.get_size_inches()[1] * fig.dpi
        for ax in fig.axes:
            for im in ax.images:
                values = im.get_array()
                for i in range(values.shape[0]):
                    for j in range(values.shape[1]):
                        x, y = ax.transData.transform((j + 0.35, i - 0.35))  # a corner of the cell, clear of its text
                        rgb = tuple(round(255 * c) for c in im.cmap(im.norm(values[i, j]))[:3])
                        expected.append(((round(x), round(height - y)), rgb, float(values[i, j])))

    monkeypatch.setattr(Figure, "savefig", savefig)
    path = tmp_path / "suite.png"
    suite_run.plot(cases, rows, str(path), "suite test")
    with Image.open(path) as img:
        saved = img.convert("RGB")
        off = [(value, want, saved.getpixel(xy)) for xy, want, value in expected
               if max(abs(a - b) for a, b in zip(saved.getpixel(xy), want)) > 2]
    assert len(expected) == 3 * 2 * 21 and not off, off[:5]
