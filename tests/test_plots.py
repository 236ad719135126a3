"""The plots a person reads: each rendered, its labels, legends and axis ranges checked on the figure."""

from __future__ import annotations

import json
import types

import matplotlib
import matplotlib.container
import numpy as np

from jaxdata.tools.report import ablation_figure, ablation_plot, plan_plot

matplotlib.use("Agg")


def table(phases: list[tuple[int, int]], names: list[str]) -> types.SimpleNamespace:
  rows = {
    n: types.SimpleNamespace(
      unique_tokens=1000.0 * (i + 1), processed_tokens=[500.0 * (k + 1) for k in range(len(phases))]
    )
    for i, n in enumerate(names)
  }
  return types.SimpleNamespace(tokens_per_step=100, datasets=rows, phases=phases, total_tokens=100 * phases[-1][1])


def test_the_plan_plot_labels_every_panel_and_tells_bars_apart_without_colour(tmp_path):
  names = ["web", "code", "books"]
  weights = np.tile([0.5, 0.3, 0.2], (60, 1))
  fig = plan_plot(table([(0, 20), (20, 60)], names), weights, names, str(tmp_path / "plan.png"))
  top, middle, bottom = fig.axes
  assert top.get_xlabel() == "step" and middle.get_xlabel() == "step" and bottom.get_xlabel() == "phase"
  for ax in (top, middle, bottom):
    assert [t.get_text() for t in ax.get_legend().get_texts()] == names
  assert "grey lines: 1 phase change)" in top.get_title() and "black" not in top.get_title()
  hatches = {patch.get_hatch() for patch in bottom.patches}
  assert len(hatches) == len(names)  # one pattern per dataset
  assert (tmp_path / "plan.png").stat().st_size > 0


def test_a_trajectory_of_many_phases_draws_no_wall_of_lines_and_readable_ticks(tmp_path):
  names = ["web", "code"]
  phases = [(k * 10, (k + 1) * 10) for k in range(48)]
  weights = np.tile([0.6, 0.4], (480, 1))
  fig = plan_plot(table(phases, names), weights, names, str(tmp_path / "plan.png"))
  top, _, bottom = fig.axes
  assert not [line for line in top.get_lines() if line.get_xdata()[0] == line.get_xdata()[-1]]  # no vertical lines
  assert len(bottom.get_xticklabels()) <= 10


def test_the_ablation_plot_spans_the_losses_and_keeps_its_legend_off_the_bars(tmp_path):
  rows = [
    types.SimpleNamespace(
      name=n,
      domain_loss={"web": 3.0 + d, "code": 2.5 + d},
      target_loss=2.8 + d,
      domain_stderr={"web": 0.01, "code": 0.02},
    )
    for n, d in (("uniform", 0.0), ("doremi", 0.08))
  ]
  (ax,) = ablation_figure(rows, ["web", "code"]).axes
  low, high = ax.get_ylim()
  assert 2.0 < low < 2.5 and 3.08 < high < 3.5  # the 0.08 differences fill the axis (bars from 0 hid them)
  legend = ax.get_legend()
  assert [t.get_text() for t in legend.get_texts()] == ["uniform (target loss 2.800)", "doremi (target loss 2.880)"]
  assert legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted()).y1 < 0  # below the axes, off the bars
  assert len({patch.get_hatch() for patch in ax.patches}) == 2
  bars = [c for c in ax.containers if isinstance(c, matplotlib.container.BarContainer)]
  assert len(bars) == 2 and all(c.errorbar is not None for c in bars)  # the noise: +-2 standard errors
  assert high > 3.08 + 2 * 0.01  # the error bars fit inside the axis
  assert ablation_plot(rows, ["web", "code"], str(tmp_path / "ablation.png")) == str(tmp_path / "ablation.png")


def test_the_docs_show_each_plot_and_every_image_they_name_exists():
  import os  # noqa: PLC0415
  import re  # noqa: PLC0415

  docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
  shown = set()
  for page in os.listdir(docs):
    if page.endswith(".md"):
      for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", open(os.path.join(docs, page), encoding="utf-8").read()):
        assert os.path.isfile(os.path.join(docs, image)), (page, image)
        shown.add(os.path.basename(image))
  assert {"plan.png", "report-shares.png", "report-sources.png", "ablation.png"} <= shown


def _stats_line(step: int, web_target: float) -> dict:
  """A stats line of two sources, web's target share as given."""
  return {
    "step": step,
    "tokens_per_source": {"web": 600, "code": 400},
    "documents_per_source": {"web": 6, "code": 4},
    "target_share": {"web": web_target, "code": 1 - web_target},
    "share_batch": {"web": 0.6, "code": 0.4},
    "padding_fraction": 0.01,
  }


def test_the_report_of_an_online_run_draws_no_line_per_update_and_labels_its_axes(tmp_path, monkeypatch):

  from jaxdata.tools import report  # noqa: PLC0415

  figures = []
  real = report._figure
  monkeypatch.setattr(report, "_figure", lambda **kw: figures.append(real(**kw)) or figures[-1])
  lines = []
  for step in range(40):  # new weights every step, as an online controller gives them
    w = 0.3 + 0.01 * (step % 7)
    lines.append(_stats_line(step, w))
  (tmp_path / "stats.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
  report.write_report(str(tmp_path / "stats.jsonl"), str(tmp_path / "report"))
  shares, sources, padding = (fig.axes[0] for fig in figures)
  vertical = [line for line in sources.get_lines() if len(set(line.get_xdata())) == 1]
  assert vertical == [] and "weight changes, not drawn" in sources.get_xlabel()
  assert sources.get_ylim() == (0.0, 1.0) and sources.get_legend() is not None
  assert shares.get_ylabel() == "cumulative share of tokens" and len(shares.get_legend().get_texts()) == 4
  assert padding.get_xlabel() == "step" and padding.get_legend() is not None


def test_a_config_change_is_marked_on_every_report_plot_as_one_and_legends_sit_beside_the_data(tmp_path, monkeypatch):
  # A restore onto new weights was drawn as a phase change on one plot and on no shares plot; legends
  # covered the curves; tick labels were 7 points.
  from jaxdata.tools import report  # noqa: PLC0415

  figures = []
  real = report._figure
  monkeypatch.setattr(report, "_figure", lambda **kw: figures.append(real(**kw)) or figures[-1])
  lines = []
  for step in range(30):
    w = 0.5 if step < 10 else 0.7 if step < 20 else 0.3  # a phase at 10, a config change at 20
    line = _stats_line(step, w)
    if step == 20:
      line["config_change"] = {"step": 20, "before": "0123456789abcdef", "rows": ["packing: seq_len=64 -> seq_len=96"]}
    lines.append(line)
  (tmp_path / "stats.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
  series = report.write_report(str(tmp_path / "stats.jsonl"), str(tmp_path / "report"))
  assert series["phase_changes"] == [10] and series["config_change_steps"] == [20]
  for fig in figures:
    ax = fig.axes[0]
    marked = [line for line in ax.get_lines() if line.get_label() == "config changed at a restore"]
    assert [list(line.get_xdata()) for line in marked] == [[20, 20]]
    renderer = fig._get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1  # beside the axes, never over the curves
    assert all(label.get_fontsize() >= report.TEXT_SIZE for label in ax.get_xticklabels())
