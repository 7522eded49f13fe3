"""report_plots: the report's PNGs, their titles by device kind, validation panels and calibration."""

from __future__ import annotations

from shogi_dnn.analysis import report_plots
from shogi_dnn.folders import run_files
from tests.support.metricsgen import write_metrics


def test_calibration_plot_shows_counts_and_marks_small_bins() -> None:
    result = {"ece": 0.03, "reliability": [
        {"lo": 0.0, "hi": 0.1, "positions": 1, "mean_prob": 0.05, "mean_label": 0.0},
        {"lo": 0.4, "hi": 0.5, "positions": 5000, "mean_prob": 0.45, "mean_label": 0.44},
        {"lo": 0.5, "hi": 0.6, "positions": 0, "mean_prob": None, "mean_label": None}]}
    assert report_plots.calibration_points(result) == [(0.05, 0.0, 1, True), (0.45, 0.44, 5000, False)]
    ax, counts = report_plots.calibration_figure({"validation": result}).axes
    # The counts are on a bar panel below the curves (on the curve panel the diagonal struck them through).
    assert len(ax.texts) == 0 and [t.get_text() for t in counts.texts] == ["1", "5,000"]
    assert [round(p.get_height()) for p in counts.patches] == [1, 5000]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(f"< {report_plots.SMALL_BIN} positions" in t for t in legend)


def test_sample_axes_read_in_thousands_with_few_ticks() -> None:
    # "100000150000200000...": six-digit tick labels ran together on the validation panels.
    from shogi_dnn import plotting

    assert [plotting.count_label(v) for v in (0, 950, 150_000, 1_200_000, 2.5e9)] == ["0", "950", "150k",
                                                                                      "1.2M", "2.5G"]
    records = [{"kind": "validation", "samples": s, "loss": 0.6 - s / 1e7, "accuracy": 0.6, "epoch": 0,
                "stage": i, "step": i} for i, s in enumerate(range(100_000, 500_000, 50_000))]
    fig = report_plots.validation_figure(records)
    fig.canvas.draw()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        labels = [t for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
        assert 2 <= len(labels) <= 6 and all(t.get_text().endswith("k") for t in labels)
        boxes = [t.get_window_extent() for t in labels]
        assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:]))


def test_per_device_titles_and_validation_panels_with_labels_and_epochs(tmp_path, monkeypatch) -> None:
    """A CPU run's per-device plots say CPU (a GPU run's GPU); the validation panels have axis labels and
    mark each point with its epoch and stage, and each new epoch with a line."""
    records = run_files.read_metrics(write_metrics(tmp_path, gpus=2).parent)
    cpu = [{**r, "per_gpu": [{**g, "device": g["device"].replace("GPU", "CPU")} for g in r["per_gpu"]]}
           for r in records]
    plots = report_plots.make_plots(tmp_path, cpu, {})
    assert set(plots) == {"loss", "accuracy", "throughput", "lr", "validation"}
    fig = report_plots._figure("x", "y")[0]          # the same builder as the saved plots
    assert fig.axes[0].get_xlabel() == report_plots.SAMPLES_LABEL
    second_epoch = [{**r, "epoch": 1, "stage": 0, "samples": r["samples"] * 2} if r["kind"] == "validation"
                    and r["step"] == 20 else r for r in cpu]
    panels = report_plots.validation_figure(second_epoch).axes
    assert [ax.get_ylabel() for ax in panels] == [label for _, label in report_plots.VALIDATION_PANELS]
    assert all(ax.get_xlabel() == report_plots.SAMPLES_LABEL for ax in panels)
    texts = [t.get_text() for t in panels[0].texts]
    assert texts == ["e0 s0", "e1 s0", "epoch 1"]
    titles, original = {}, report_plots._save

    def capture(fig, path):
        titles[path.stem] = fig.axes[0].get_title()
        return original(fig, path)
    monkeypatch.setattr(report_plots, "_save", capture)
    report_plots.make_plots(tmp_path, cpu, {})
    assert titles["loss"] == "training loss per CPU" and titles["throughput"] == "positions/s per CPU"
    report_plots.make_plots(tmp_path, records, {})
    assert titles["accuracy"] == "training accuracy per GPU"
