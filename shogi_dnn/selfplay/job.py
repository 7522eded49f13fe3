"""`shogi-dnn selfplay`: games of USI engines into a folder, in seed order, resumable, checkable.

The folder (one writer: writer.lock):

  file                     what
  selfplay.json            the settings (engines' ids, nodes, openings, random plies, first seed); a rerun
                           with others is refused
  selfplay-NNNNN.csa       the games of slots 100 N .. 100 N + 99 (CSA V2.2, `/` between games); slot i
                           plays seed first_seed + i (game.py)
  SUMMARY.tsv              one row per finished slot: slot, seed, file, nodes, random_plies, plies, winner,
                           ending (an aborted slot: ending `aborted`, its reason in ABORTED.tsv)
  ABORTED.tsv              slot, seed, reason
  selfplay-report.json     games, endings, nodes, engine plies, wall and CPU seconds (ours + the engines')

Slots are written in order whatever the number of workers (a finished game waits for the ones before it),
so the folder is always a prefix of the run. A killed run (SIGKILL included) resumes at the first slot
SUMMARY.tsv lacks: a torn last game or summary line is cut first, so the files end byte-identical to an
uninterrupted run's. SIGINT/SIGTERM stop at once (games in flight are replayed on resume).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import resource
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shogi_dnn.annotate.usi_client import UsiEngine, find_engine
from shogi_dnn.errors import ConfigError, RunError
from shogi_dnn.folders import locks, run_files
from shogi_dnn.kifu.csa_writer import format_csa
from shogi_dnn.selfplay.game import GameAborted, Opening, PlayedGame, Settings, play_game
from shogi_dnn.wording import plural, progress_bar

SETTINGS_JSON = "selfplay.json"
SUMMARY_TSV = "SUMMARY.tsv"
ABORTED_TSV = "ABORTED.tsv"
REPORT_JSON = "selfplay-report.json"
GAMES_PER_FILE = 100
SUMMARY_HEADER = ("slot", "seed", "file", "nodes", "random_plies", "plies", "winner", "ending")
ABORTED = "aborted"
SCHEMA = "shogi-dnn/selfplay/1"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: `done` slots are in the folder (rerun the command to continue)."""

    def __init__(self, done: int, signum: int) -> None:
        super().__init__(f"{done} games written")
        self.done, self.signum = done, signum


def file_name(slot: int) -> str:
    return f"selfplay-{slot // GAMES_PER_FILE:05d}.csa"


def game_text(game: PlayedGame, first_in_file: bool) -> str:
    """A game as it stands in its file: `V2.2` opens a file, `/` separates the games after it."""
    plan = game.plan
    header = [f"seed:{plan.seed} random_plies:{plan.random_plies} nodes:{plan.nodes}"]
    text = format_csa(game.record, header=header, tail=game.notes)
    return text if first_in_file else "/\n" + text.split("\n", 1)[1]


def settings_to_dict(settings: Settings, first_seed: int, engine_ids: list[str]) -> dict[str, Any]:
    return {"schema": SCHEMA, "first_seed": first_seed, "engines": list(settings.engines),
            "engine_ids": engine_ids, "nodes": list(settings.nodes),
            "random_plies": list(settings.random_plies),
            "openings": [{"sfen": o.sfen, "moves": list(o.moves)} for o in settings.openings],
            "options": [list(o) for o in settings.options], "max_plies": settings.max_plies,
            "games_per_file": GAMES_PER_FILE}


def settings_from_dict(data: dict[str, Any], where: str) -> tuple[Settings, int, list[str]]:
    """(settings, first seed, engine ids) of a folder's selfplay.json. Raises ConfigError naming the key."""
    try:
        if data.get("schema") != SCHEMA:
            raise ConfigError(f"{where}: not a selfplay settings file (schema {data.get('schema')!r})")
        settings = Settings(tuple(data["engines"]), tuple(int(n) for n in data["nodes"]),
                            (int(data["random_plies"][0]), int(data["random_plies"][1])),
                            tuple(Opening(o["sfen"], tuple(o["moves"])) for o in data["openings"]),
                            tuple((str(k), str(v)) for k, v in data["options"]), int(data["max_plies"]))
        return settings, int(data["first_seed"]), [str(i) for i in data["engine_ids"]]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(f"{where}: bad or missing key ({exc})") from None


@dataclasses.dataclass
class Folder:
    """What a selfplay folder holds: finished slots (SUMMARY.tsv rows), in order."""

    path: Path
    rows: list[dict[str, str]]

    @property
    def done(self) -> int:
        return len(self.rows)


def _read_tsv(path: Path) -> list[dict[str, str]]:
    """Rows of a TSV whose first line is its header; a torn last line (no newline) is left out."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    complete = lines[:-1]                 # the text after the last newline is torn (or empty)
    if not complete:
        return []
    header = complete[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in complete[1:] if line]


def _append_tsv(path: Path, header: tuple[str, ...], row: list[Any]) -> None:
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", encoding="utf-8") as f:
        if new:
            f.write("\t".join(header) + "\n")
        f.write("\t".join(str(x) for x in row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _games_in(path: Path) -> list[str]:
    """The games of one of our CSA files, each as written (the first with its `V2.2`)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    pieces = text.split("\n/\n")
    games = [piece + "\n" for piece in pieces[:-1]]
    last = pieces[-1]
    if last.endswith("\n") and last.strip():
        games.append(last)
    return [g if i == 0 else "/\n" + g for i, g in enumerate(games)]


def repair(out: Path) -> Folder:
    """The folder as SUMMARY.tsv says it is: torn summary lines and games it does not list are cut."""
    summary = out / SUMMARY_TSV
    rows = _read_tsv(summary)
    if summary.exists():                    # rewrite without a torn last line
        text = summary.read_text(encoding="utf-8")
        if not text.endswith("\n"):
            run_files.write_atomic(summary, text[:text.rfind("\n") + 1])
    rows = [r for i, r in enumerate(rows) if r.get("slot") == str(i)]      # a contiguous prefix only
    written = collections.Counter(r["file"] for r in rows if r["ending"] != ABORTED)
    for path in sorted(out.glob("selfplay-*.csa")):
        games = _games_in(path)
        keep = written.get(path.name, 0)
        if keep == 0:
            path.unlink()
        elif len(games) != keep or "".join(games) != path.read_text(encoding="utf-8"):
            run_files.write_atomic(path, "".join(games[:keep]))
    return Folder(out, rows)


def _settings_check(out: Path, wanted: dict[str, Any]) -> None:
    path = out / SETTINGS_JSON
    if path.exists():
        try:
            have = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: unreadable ({exc}): choose another --out") from None
        if have != wanted:
            changed = sorted(k for k in set(have) | set(wanted) if have.get(k) != wanted.get(k))
            raise ConfigError(f"{out}: made with other settings ({', '.join(changed)} differ): choose "
                              "another --out, or the same settings to continue it")
    elif any(out.glob("selfplay-*.csa")) or (out / SUMMARY_TSV).exists():
        raise ConfigError(f"{out}: holds games but no {SETTINGS_JSON}: choose another --out")
    else:
        run_files.write_json_atomic(path, wanted)


def engine_ids(settings: Settings) -> list[str]:
    """Each engine's `id name` (a probe process each: a missing or broken engine fails here, at once)."""
    ids = []
    for path in settings.engines:
        probe = UsiEngine(path, settings.options)
        ids.append(probe.name or Path(path).name)
        probe.close()
    return ids


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[list[int]]:
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        stop.set()

    saved = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):            # not the main thread: leave signals alone
            saved[signum] = signal.signal(signum, handle)
    try:
        yield received
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def run_selfplay(out: str | os.PathLike[str], settings: Settings, games: int, first_seed: int, *,
                 workers: int = 1, progress: bool = False) -> dict[str, Any]:
    """Play slots 0 .. games-1 into `out` (module docstring), continuing a folder made with the same
    settings. Returns the report (also written as selfplay-report.json).

    Raises:
        ConfigError: bad settings or a folder made with others; RunError: an engine does not start;
        locks.LockedError: another selfplay writes `out`; Interrupted: SIGINT/SIGTERM.
    """
    if games < 1 or workers < 1:
        raise ConfigError(f"--games {games} and --workers {workers}: both must be >= 1")
    if first_seed < 0:
        raise ConfigError(f"--seed {first_seed}: must be >= 0")
    settings = dataclasses.replace(settings, engines=tuple(find_engine(e) for e in settings.engines))
    out = Path(out)
    ids = engine_ids(settings)
    with locks.acquire(out, locks.WRITER_LOCK, "selfplay", instead="choose another --out"):
        _settings_check(out, settings_to_dict(settings, first_seed, ids))
        folder = repair(out)
        started, cpu0 = time.monotonic(), _cpu()
        done_before = folder.done
        stop = threading.Event()
        bar = progress_bar(total=games, initial=min(done_before, games), desc="selfplay", unit="game",
                           enabled=progress)
        with _stop_on_signals(stop) as received, \
                concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            pending: dict[int, concurrent.futures.Future] = {}
            slot = folder.done
            next_submit = slot
            try:
                while slot < games and not stop.is_set():
                    while next_submit < games and len(pending) < 2 * workers:
                        pending[next_submit] = pool.submit(_play, first_seed + next_submit, settings, ids,
                                                           stop)
                        next_submit += 1
                    future = pending.pop(slot)
                    while not stop.is_set():
                        try:
                            outcome = future.result(timeout=0.5)
                            break
                        except concurrent.futures.TimeoutError:
                            continue
                    if stop.is_set():
                        break
                    _write_slot(out, folder, slot, first_seed + slot, outcome)
                    slot += 1
                    bar.update(1)
                    elapsed = time.monotonic() - started
                    bar.set_postfix_str(f"{(slot - done_before) / max(elapsed, 1e-9):.2f} games/s")
            finally:
                stop.set()
                for future in pending.values():
                    future.cancel()
        bar.close()
        report = _report(out, folder, time.monotonic() - started, _cpu() - cpu0, done_before)
        run_files.write_json_atomic(out / REPORT_JSON, report)
        if received:
            raise Interrupted(folder.done, received[0])
        return report


def _play(seed: int, settings: Settings, ids: list[str], stop: threading.Event) -> PlayedGame | str:
    """A game, or the reason it was aborted (GameAborted's words)."""
    if stop.is_set():
        return "stopped"
    try:
        return play_game(seed, settings, ids)
    except GameAborted as exc:
        return str(exc) or "aborted"


def _write_slot(out: Path, folder: Folder, slot: int, seed: int, outcome: PlayedGame | str) -> None:
    """The game's text, then its SUMMARY row (fsync'd in that order: a row never names a missing game)."""
    name = file_name(slot)
    if isinstance(outcome, str):
        _append_tsv(out / ABORTED_TSV, ("slot", "seed", "reason"), [slot, seed, outcome.replace("\t", " ")])
        row = [slot, seed, name, "", "", "", "", ABORTED]
    else:
        path = out / name
        first = not path.exists() or path.stat().st_size == 0
        with path.open("a", encoding="utf-8") as f:
            f.write(game_text(outcome, first))
            f.flush()
            os.fsync(f.fileno())
        record, plan = outcome.record, outcome.plan
        row = [slot, seed, name, plan.nodes, plan.random_plies, len(record.moves), record.winner.value,
               record.ending.value]
    _append_tsv(out / SUMMARY_TSV, SUMMARY_HEADER, row)
    folder.rows.append(dict(zip(SUMMARY_HEADER, map(str, row))))


def _cpu() -> float:
    """User + system seconds of this process and its finished children (the engines)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _report(out: Path, folder: Folder, wall: float, cpu: float, done_before: int) -> dict[str, Any]:
    rows = folder.rows
    played = [r for r in rows if r["ending"] != ABORTED]
    this_run = len(rows) - done_before
    return {"schema": SCHEMA, "slots": len(rows), "games": len(played), "aborted": len(rows) - len(played),
            "endings": dict(collections.Counter(r["ending"] for r in played).most_common()),
            "winners": dict(collections.Counter(r["winner"] for r in played).most_common()),
            "nodes": dict(sorted(collections.Counter(r["nodes"] for r in played).items())),
            "plies": sum(int(r["plies"]) for r in played),
            "this_run": {"slots": this_run, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                         "games_per_cpu_s": round(this_run / cpu, 4) if cpu > 0 else None}}


def verify(out: str | os.PathLike[str], sample: int) -> list[str]:
    """Replay `sample` games of `out` (evenly spaced slots) from their seeds: the differences, one line each
    (empty: every one replayed to the same text).

    Raises:
        ConfigError: not a selfplay folder, or nothing to verify.
    """
    out = Path(out)
    path = out / SETTINGS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{out}: no {SETTINGS_JSON}: not a selfplay folder") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc})") from None
    settings, first_seed, ids = settings_from_dict(data, str(path))
    # the engine where the folder was made, else the same name on this machine's PATH (or /usr/games)
    settings = dataclasses.replace(settings, engines=tuple(
        find_engine(e) if os.path.exists(e) else find_engine(Path(e).name) for e in settings.engines))
    rows = [r for r in _read_tsv(out / SUMMARY_TSV) if r["ending"] != ABORTED]
    if not rows or sample < 1:
        raise ConfigError(f"{out}: no game to verify" if not rows else f"--verify {sample}: must be >= 1")
    picked = [rows[round(k * (len(rows) - 1) / max(1, sample - 1))] for k in range(min(sample, len(rows)))]
    by_file: dict[str, list[str]] = {}
    problems = []
    for row in dict((r["slot"], r) for r in picked).values():
        games = by_file.setdefault(row["file"], _games_in(out / row["file"]))
        index = [r["slot"] for r in rows if r["file"] == row["file"]].index(row["slot"])
        try:
            again = play_game(int(row["seed"]), settings, ids)
        except GameAborted as exc:
            problems.append(f"slot {row['slot']} (seed {row['seed']}): aborted on replay: {exc}")
            continue
        if index >= len(games) or game_text(again, index == 0) != games[index]:
            problems.append(f"slot {row['slot']} (seed {row['seed']}, {row['file']} game {index + 1}): "
                            "replayed to another game")
    return problems


def describe(report: dict[str, Any]) -> str:
    """The end line of a run."""
    run = report["this_run"]
    endings = ", ".join(f"{k} {v}" for k, v in report["endings"].items())
    rate = f"{run['games_per_cpu_s']:.3f} games per CPU-second" if run["games_per_cpu_s"] else "no game"
    return (f"{plural(report['games'], 'game')} in the folder ({report['aborted']} aborted); this run "
            f"{plural(run['slots'], 'slot')} in {run['wall_s']:.0f} s, {run['cpu_s']:.0f} CPU-s "
            f"(ours + the engines'): {rate}; endings: {endings or 'none'}")


__all__ = ["Interrupted", "RunError", "describe", "repair", "run_selfplay", "verify"]
