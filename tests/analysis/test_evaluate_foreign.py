"""evaluate on another dataset (issue 30): checked game by game against the games the run trained on
(RUN/trained-games.npz, dataset/game_keys.py). A dataset of other records scores without a flag, named in
the table and the JSON; the run's records converted again with another split are refused in one line with
the counts; --allow-trained-games (alias --allow-changed-data) scores them, labelled with the counts; report
names the other dataset too, and refuses such an evaluation once the run has trained on other games since."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shogi_dnn import cli
from shogi_dnn.analysis import report, summary
from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import game_keys, identity, shards
from shogi_dnn.errors import RunError
from shogi_dnn.folders import run_files
from tests.support.cli import refusal_in_fresh_process
from tests.support.evalrun import make_random_run
from tests.support.kifugen import write_corpus
from tests.support.metricsgen import write_metrics


def convert(records: Path, out: Path, val_fraction: float) -> shards.Manifest:
    run_convert([records], out, ConvertSettings(val_fraction=val_fraction), workers=1, overwrite=True)
    return shards.read_manifest(out)


def keys(manifest: shards.Manifest, split: str) -> set[int]:
    return set(game_keys.split_keys(manifest, (split,)).keys.tolist())


@pytest.mark.slow
def test_evaluate_on_another_dataset_with_and_without_games_the_run_trained_on(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_corpus(tmp_path / "records", seed=4, files=4, per_file=8)           # 32 games
    write_corpus(tmp_path / "other", seed=5, files=2, per_file=8)             # 16 other games
    data = convert(tmp_path / "records", tmp_path / "data", 0.25)
    other = convert(tmp_path / "other", tmp_path / "other-data", 0.5)
    again = convert(tmp_path / "records", tmp_path / "again", 0.5)            # the same records, another split
    run = make_random_run(tmp_path / "run", tmp_path / "data", devices=2)
    info = json.loads((run / "run.json").read_text())                         # as the trainer records them
    info["dataset"] = identity.dataset_identity(data).to_dict()
    (run / "run.json").write_text(json.dumps(info))
    game_keys.write_trained_games(run, data)

    # The run's own split first: its eval-validation.json is not replaced by scores on other data.
    assert cli.main(["evaluate", "--run-dir", str(run)]) == 0
    own = (run / "eval-validation.json").read_bytes()
    capsys.readouterr()
    # Other records: no game in common, scored without a flag; the table and the JSON name the dataset.
    scored = len(keys(other, "validation"))
    assert cli.main(["evaluate", "--run-dir", str(run), "--data", str(other.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("split validation: "))
    assert lines[header + 1] == (f"data {other.root.resolve()} (another dataset: none of its {scored} games is one the "
                                 "run trained on)")
    assert not any(line.startswith("WARNING: TRAINED GAMES") for line in lines)
    path = run_files.eval_path(run, "validation", other.root)
    assert lines[-1] == f"wrote {path}" and path.name.startswith("eval-validation@other-data-")
    assert (run / "eval-validation.json").read_bytes() == own
    result = json.loads(path.read_text())
    check = result["data_check"]
    assert result["data_dir"] == str(other.root.resolve()) and check["status"] == "foreign"
    assert check["games"]["games"] == scored == result["games"] and check["games"]["trained_games"] == 0
    assert check["detail"].startswith(f"the validation split of dataset {other.root.resolve()} (manifest ")
    assert report.check_evals(run, {"validation": result}) == {"validation": result["warnings"]}
    # report reads the run's own evaluation only.
    assert run_files.read_evals(run) == {"validation": json.loads(own)}
    table = summary.summary_table(run).splitlines()
    assert table[0].startswith("WARNING: only") and table[1].startswith("validation split: model vs baselines")
    assert not table[2].startswith("data ")                  # the run's own data: no line naming other data
    write_metrics(run)
    assert str(other.root.resolve()) not in report.write_report(run).read_text()
    # The other records converted as a test-only set (convert --test-fraction 1): its test split is scored.
    assert cli.main(["convert", str(tmp_path / "other"), "--out", str(tmp_path / "held"), "--test-fraction", "1",
                     "--workers", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", "--run-dir", str(run), "--data", str(tmp_path / "held")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("split test: ") for line in lines) and not lines[0].startswith("WARNING: IN-")
    assert lines[-1] == f"wrote {run_files.eval_path(run, 'test', tmp_path / 'held')}"

    # The run's records converted again with another split: refused, saying how many games it trained on.
    trained = keys(again, "validation") & keys(data, "train")
    games = game_keys.split_keys(again, ("validation",))
    positions = sum(p for k, p in zip(games.keys.tolist(), games.positions.tolist()) if k in trained)
    total = sum(s.positions for s in again.split("validation"))
    assert 0 < len(trained) < len(keys(again, "validation"))
    assert cli.main(["evaluate", "--run-dir", str(run), "--data", str(again.root)]) == 2
    err = capsys.readouterr().err.strip()
    ident = identity.dataset_identity(again, ("validation",))
    detail = (f"the run trained on {len(trained)} of the {len(keys(again, 'validation'))} games ({positions:,} of "
              f"{total:,} positions) of the validation split of dataset {again.root.resolve()} "
              f"({ident.describe(['validation'])})")
    assert err == (f"shogi-dnn evaluate: error: {run}: {detail}. Pass --allow-trained-games to score anyway (the "
                   "output is labelled)")
    # ... before TensorFlow loads (it refused after loading it: 3.4 s, issue 30's acceptance check)
    assert refusal_in_fresh_process(["evaluate", "--run-dir", str(run), "--data", str(again.root)]).strip() \
        .endswith(err)
    # A run from before trained-games.npz: its games are read from its dataset while it is unchanged.
    saved = (run / "trained-games.npz").read_bytes()
    (run / "trained-games.npz").unlink()
    assert cli.main(["evaluate", "--run-dir", str(run), "--data", str(again.root)]) == 2
    assert capsys.readouterr().err.strip() == err
    (run / "trained-games.npz").write_bytes(saved)
    # The flag (here by its old name) scores it, labelled with the counts on the console and in the JSON.
    assert cli.main(["evaluate", "--run-dir", str(run), "--data", str(again.root), "--allow-changed-data"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"WARNING: TRAINED GAMES scored, with --allow-trained-games: {detail}"
    result = json.loads(run_files.eval_path(run, "validation", again.root).read_text())
    assert result["data_check"]["status"] == "overlap" and result["data_check"]["detail"] == detail
    assert result["data_check"]["games"]["trained_games"] == len(trained)
    assert result["data_check"]["games"]["trained_positions"] == positions
    assert run_files.eval_labels(result)[0] == f"TRAINED GAMES scored, with --allow-trained-games: {detail}"
    assert not summary.summary_table(run).startswith("WARNING: TRAINED GAMES")     # the run's own is shown

    # The run trains on other games since (resumed on `other` with --data-changed): report refuses the
    # evaluation checked against its games then, and labels it with the flag.
    before = game_keys.read_trained_games(run).games
    game_keys.write_trained_games(run, other)
    now = game_keys.read_trained_games(run).games
    with pytest.raises(RunError) as refused:
        report.check_evals(run, {"validation": result})
    assert str(refused.value) == (
        f"{run / 'eval-validation.json'} was checked against the {before} games the run had trained on; it has "
        f"trained on {now} since (resumed on other data), some of which may be among the scored games: evaluate "
        "again, or pass --allow-changed-data to report it anyway (labelled)")
    labels = report.check_evals(run, {"validation": result}, allow_changed_data=True)["validation"]
    assert labels[-1].startswith(f"DATA CHANGED: checked against the {before} games")
