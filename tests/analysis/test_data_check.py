"""evaluate and report against the data a run was trained on (run.json "dataset", identity.py), for a run
without RUN/trained-games.npz (trained before runs recorded their games; with it: test_evaluate_foreign.py):
a split converted again with another --val-fraction is refused in one line, scored and labelled with
--allow-changed-data; a run from before identities is scored with one line saying so; fewer than 50
games warn beside the table and in the JSON; report refuses an evaluation of data the run no longer
trains on unless --allow-changed-data, and labels it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.analysis import report, summary
from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import identity, shards
from shogi_dnn.errors import RunError
from tests.support.evalrun import make_random_run
from tests.support.kifugen import write_corpus
from tests.support.metricsgen import write_metrics


def convert(records: Path, out: Path, val_fraction: float) -> identity.DatasetIdentity:
    run_convert([records], out, ConvertSettings(val_fraction=val_fraction), workers=1, overwrite=True)
    return identity.dataset_identity(shards.read_manifest(out))


def set_trained_on(run: Path, ident: identity.DatasetIdentity | None) -> None:
    """run.json's "dataset", as the trainer writes it (None: a run from before identities)."""
    info = json.loads((run / "run.json").read_text())
    info.pop("dataset", None)
    if ident is not None:
        info["dataset"] = ident.to_dict()
    (run / "run.json").write_text(json.dumps(info))


@pytest.mark.slow
def test_evaluate_checks_the_split_and_labels_what_it_scores(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    write_corpus(tmp_path / "records", seed=4, files=4, per_file=8)            # 32 games
    data, run = tmp_path / "data", tmp_path / "run"
    trained = convert(tmp_path / "records", data, 0.25)
    make_random_run(run, data, devices=2)
    games = trained.splits["validation"].games
    # A run from before identities: scored, the identity said unknown once; too few games warned.
    with caplog.at_level("WARNING", logger="shogi_dnn.analysis.evaluate"):
        assert cli.main(["evaluate", "--run-dir", str(run)]) == 0
    assert caplog.text.count("records no dataset identity") == 1
    out = capsys.readouterr().out
    few = (f"only {games} games in validation: too few to compare models (want >= 50; differences between runs "
           "of a few points are noise here)")
    assert out.startswith(f"WARNING: {few}\nsplit validation:")
    result = json.loads((run / "eval-validation.json").read_text())
    assert result["data_check"] == {"status": "unknown", "detail": ""} and result["warnings"] == [few]
    assert result["games"] == games and result["dataset"]["splits"]["validation"] == trained.to_dict()[
        "splits"]["validation"]

    # The run records its data; the folder converted again with another --val-fraction: refused in one line.
    set_trained_on(run, trained)
    now = convert(tmp_path / "records", data, 0.5)
    assert cli.main(["evaluate", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    d = data.resolve()
    assert err == (f"shogi-dnn evaluate: error: {run} was trained on dataset {d} (manifest {trained.manifest[:8]}, "
                   f"validation {games} games); {d} now has manifest {now.manifest[:8]}, validation "
                   f"{now.splits['validation'].games} games: its validation split changed (re-converted?); {run} has "
                   "no trained-games.npz (trained before runs recorded their games) and the data it trained on "
                   "changed or moved since, so it cannot tell another dataset's games from those it trained on. "
                   "Pass --allow-changed-data to score anyway (the output is labelled).")
    # --allow-changed-data: scored, labelled on the console and in the JSON.
    assert cli.main(["evaluate", "--run-dir", str(run), "--allow-changed-data"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    detail = err.split(f"{run} was trained on ", 1)[1].split(f"; {run} has no", 1)[0]
    assert first == f"WARNING: DATA CHANGED since training, scored with --allow-changed-data: {detail}"
    result = json.loads((run / "eval-validation.json").read_text())
    assert result["data_check"] == {"status": "changed", "detail": detail}
    write_metrics(run)
    info = json.loads((run / "run.json").read_text())
    info["history"] = [{"time": "2026-01-02T12:00:00+0000", "event": "data changed", "checkpoint": "ckpt-00000008",
                        "from": {"data_dir": "/old", "manifest": "0" * 64}, "to": trained.to_dict()}]
    (run / "run.json").write_text(json.dumps(info))
    text = report.write_report(run).read_text()
    assert f"- data: `{data}` ({trained.describe()})\n" in text
    assert (f"- data changed at 2026-01-02T12:00:00+0000 (resumed from ckpt-00000008): `/old` manifest 00000000 -> "
            f"`{d}` manifest {trained.manifest[:8]}\n") in text
    assert f"> **WARNING**: DATA CHANGED since training, scored with --allow-changed-data: {detail}" in text
    assert summary.summary_table(run).startswith("WARNING: DATA CHANGED since training")

    # The run trains on the new folder now (resumed with --data-changed) and is scored on it: same data.
    set_trained_on(run, now)
    assert cli.main(["evaluate", "--run-dir", str(run)]) == 0
    assert json.loads((run / "eval-validation.json").read_text())["data_check"]["status"] == "same"


def test_report_refuses_an_evaluation_of_data_the_run_no_longer_trains_on(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    def ident(digest: str, games: int) -> identity.DatasetIdentity:
        return identity.DatasetIdentity("/d", digest * 8, {"validation": identity.SplitIdentity(games, 10 * games,
                                                                                                 digest * 8)})

    run = tmp_path / "run"
    run.mkdir()
    old, new = ident("a", 118), ident("b", 30)
    (run / "run.json").write_text(json.dumps({"data_dir": "/d", "dataset": new.to_dict()}))
    scored = {"split": "validation", "dataset": old.to_dict(), "data_check": {"status": "same", "detail": ""},
              "warnings": []}
    with pytest.raises(RunError) as refused:
        report.check_evals(run, {"validation": scored})
    assert str(refused.value) == (
        f"{run / 'eval-validation.json'} was scored on dataset /d (manifest aaaaaaaa, validation 118 games); /d now "
        "has manifest bbbbbbbb, validation 30 games: its validation split changed (re-converted?), and the run "
        "trains on the latter now: evaluate again, or pass --allow-changed-data to report it anyway (labelled)")
    [label] = report.check_evals(run, {"validation": scored}, allow_changed_data=True)["validation"]
    assert label.startswith("DATA CHANGED: scored on dataset /d (manifest aaaaaaaa")
    # Scored on the run's data: no label but the evaluation's own warnings.
    same = {**scored, "dataset": new.to_dict(), "warnings": ["only 30 games in validation: ..."]}
    assert report.check_evals(run, {"validation": same}) == {"validation": ["only 30 games in validation: ..."]}
    # An evaluation from before identities: reported, said once.
    with caplog.at_level("WARNING", logger="shogi_dnn.analysis.report_checks"):
        assert report.check_evals(run, {"validation": {"split": "validation"}, "test": {}}) == {
            "validation": [], "test": []}
    assert caplog.messages == [f"{run}: the data of eval-validation.json, eval-test.json cannot be checked against "
                               "the run's (no dataset identity recorded: scored or trained before runs recorded one)"]


def test_pick_split_scores_a_test_only_set_and_names_the_splits_to_pass(tmp_path: Path) -> None:
    from shogi_dnn.analysis.data_check import pick_split
    from tests.support.evaldata import material_dataset

    material_dataset(tmp_path / "held", {"test": (40, 0.5, False)})
    assert pick_split(tmp_path / "held", None) == "test"
    with pytest.raises(RunError) as refused:
        pick_split(tmp_path / "held", "validation")
    assert str(refused.value) == (f"{tmp_path / 'held'}: the dataset has no 'validation' shards; it has test "
                                  "(4 games): pass --split test or --split all")
    material_dataset(tmp_path / "two", {"train": (40, 0.5, False), "test": (20, 0.5, False)})
    with pytest.raises(RunError, match=r"no 'validation' shards; it has train \(4 games\), test \(2 games\): "
                                       r"pass --split train, --split test or --split all$"):
        pick_split(tmp_path / "two", None)
    material_dataset(tmp_path / "three", {"train": (40, 0.5, False), "validation": (20, 0.5, False)})
    assert pick_split(tmp_path / "three", None) == "validation" and pick_split(tmp_path / "three", "all") == "all"
