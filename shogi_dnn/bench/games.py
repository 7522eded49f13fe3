"""`shogi-dnn bench games`: the engine's strength in games, through ShogiArena (a USI tournament runner).

Our engine (`shogi-dnn usi`: the run's network, an exported ONNX model, or with neither --run-dir nor --model
the network packaged with shogi-dnn; --player material: the floor)
plays `--games` games against one opponent: `material` (the same engine on the material baseline fitted on
the run's training split, at one ply: the floor), `material:same` (the material baseline with our side's
search, limit and options: a match that measures the evaluation, not the search), or `fairy:N`
(Fairy-Stockfish searching N nodes a move, `go nodes N`: the ladder; `fairy:N:SKILL` also sets its Skill
Level, -20..20, a rung below the one-node search). Openings are random legal `--opening-plies`-move lines,
each played twice with the colours swapped. Prints wins/draws/losses, the score and the Elo difference
with its 95% interval, the moves over the deadline (--movetime), and writes the games as CSA under --out
(engine/arena.py).

Our engine's limit per move: --depth D (best-first minimax, 1: the one-ply player), --nodes N (positions
evaluated by the PUCT search) or --movetime MS (PUCT within the time); search options: --c-puct,
--batch-size, --temperature with --temperature-moves (USI options of engine/protocol.py). Run it under
`nice` on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from shogi_dnn.engine import arena
from shogi_dnn.errors import RunError

RESIGN_CP = 3000                      # both of our players resign below -3000 cp (p < 0.02)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench games", description=__doc__.split("\n\n")[1])
    parser.add_argument("--run-dir", default=None,
                        help="the run whose network plays (and whose training split the material baseline is "
                             "fitted on); neither this nor --model: the network packaged with shogi-dnn")
    parser.add_argument("--model", default=None,
                        help="play an exported ONNX model instead of the run's Keras model (faster start, "
                             "no TensorFlow)")
    parser.add_argument("--player", default="network", choices=("network", "material"),
                        help="our side: the network (default) or the material player (the floor's own "
                             "ladder rung)")
    parser.add_argument("--opponent", required=True,
                        help="material (one ply), material:same (our search and limit), fairy:N "
                             "(Fairy-Stockfish, N nodes a move) or fairy:N:SKILL (also its Skill Level, "
                             "-20..20)")
    parser.add_argument("--games", type=int, default=20, help="games, even (default 20)")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--depth", type=int, default=None, help="our engine's depth limit (default 1)")
    limit.add_argument("--nodes", type=int, default=None, help="our engine's node limit per move")
    limit.add_argument("--movetime", type=int, default=None, help="our engine's milliseconds per move")
    parser.add_argument("--c-puct", type=float, default=None, help="PUCT exploration weight (default 1.0)")
    parser.add_argument("--batch-size", type=int, default=None, help="leaves per evaluator call (default 8)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="draw the move with probability ~ visits^(1/T) over the first "
                             "--temperature-moves")
    parser.add_argument("--temperature-moves", type=int, default=None, help="move numbers with --temperature")
    parser.add_argument("--opening-plies", type=int, default=4, help="random legal moves of each opening (4)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the openings (default 1)")
    parser.add_argument("--parallel", type=int, default=1, help="games played at once (default 1)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds after which the match is stopped; the games finished by then count")
    parser.add_argument("--out", required=True, help="folder for the match files and CSA records (new)")
    return parser.parse_args(argv)


def opponent_player(spec: str, run_dir: Path | None, ours: arena.Player | None = None) -> arena.Player:
    """`material`, `material:same` (our player's limit and options), `fairy:N` or `fairy:N:SKILL` -> the
    opponent Player. The material players need a run (their baseline is fitted on its training split)."""
    if spec in ("material", "material:same") and run_dir is None:
        raise RunError(f"--opponent {spec} needs --run-dir: the material baseline is fitted on a run's "
                       "training split (any run of yours will do); fairy:N needs none")
    if spec == "material":
        assert run_dir is not None
        return arena.Player("material", arena.usi_command(run_dir, "material"),
                            {"ResignValue": RESIGN_CP}, {"depth_limit": 1})
    if spec == "material:same" and ours is not None and run_dir is not None:
        return arena.Player("material-same", arena.usi_command(run_dir, "material"), dict(ours.options),
                            dict(ours.time_control))
    kind, _, rest = spec.partition(":")
    count, _, skill = rest.partition(":")
    if kind == "fairy" and count.isdigit() and int(count) > 0 and (
            not skill or skill.lstrip("-").isdigit() and -20 <= int(skill) <= 20):
        options: dict[str, int] = {"Threads": 1, "Hash": 16}
        if skill:
            options["Skill Level"] = int(skill)
        name = f"fairy-{count}" + (f"-skill{skill}" if skill else "")
        return arena.Player(name, (arena.fairy_stockfish(),), options, {"node_limit": int(count)})
    raise RunError(f"--opponent {spec!r}: expected 'material', 'material:same', 'fairy:N' or 'fairy:N:SKILL' "
                   "(N > 0 nodes, SKILL -20..20: Fairy-Stockfish's Skill Level)")


def engine_options(args: argparse.Namespace) -> dict[str, int]:
    """Our engine's USI options (engine/protocol.py: hundredths for CPuct and Temperature)."""
    options = {"ResignValue": RESIGN_CP}
    if args.c_puct is not None:
        options["CPuct"] = round(100 * args.c_puct)
    if args.batch_size is not None:
        options["BatchSize"] = args.batch_size
    if args.temperature is not None:
        options["Temperature"] = round(100 * args.temperature)
        options["TemperatureMoves"] = args.temperature_moves if args.temperature_moves is not None else 16
    return options


def engine_limit(args: argparse.Namespace) -> dict[str, int]:
    """Our engine's per-move limit in ShogiArena's time_control keys."""
    if args.nodes is not None:
        return {"node_limit": args.nodes}
    if args.movetime is not None:
        return {"fixed_time_ms": args.movetime}
    return {"depth_limit": args.depth if args.depth is not None else 1}


def _elo_text(value: float) -> str:
    """An Elo figure: a whole number with its sign (+0, never -0), or +inf / -inf."""
    return f"{value:+}" if math.isinf(value) else f"{round(value):+d}"


def format_result(result: arena.MatchResult) -> str:
    head = (f"{result.player} vs {result.opponent}: {result.games} games  +{result.wins} ={result.draws} "
            f"-{result.losses}")
    if result.games == 0:
        text = f"{head}  no game finished: no score"
    else:
        elo, low, high = result.elo()
        interval = ("interval unbounded: too few games" if math.isinf(low) and math.isinf(high)
                    else f"95% {_elo_text(low)} .. {_elo_text(high)}")
        text = f"{head}  score {100 * result.score:.1f}%  Elo {_elo_text(elo)} ({interval})"
    if not result.complete:
        text += "  (stopped at --timeout: the games finished by then)"
    if result.not_played:
        text += f"  ({result.not_played} not played: see the arena log)"
    for name, limit, over, moves in result.over_deadline:
        text += f"\n{name}: {over} of {moves} moves over the deadline ({limit} ms, the CSA records' times)"
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv or [])
    run_dir = Path(args.run_dir) if args.run_dir else None
    if run_dir is not None and not run_dir.is_dir():
        raise RunError(f"{run_dir}: no such run directory")
    if args.player == "material" and (args.model or run_dir is None):
        raise RunError("--player material plays a run's material baseline: give --run-dir, without --model")
    model = Path(args.model) if args.model else run_dir
    player = arena.Player(args.player, arena.usi_command(model, args.player), engine_options(args),
                          engine_limit(args))
    opponent = opponent_player(args.opponent, run_dir, player)
    if opponent.name == player.name:
        raise RunError(f"--player {args.player} --opponent {args.opponent}: the same player twice")
    start = time.monotonic()
    result = arena.run_match(Path(args.out), player, opponent, args.games, args.opening_plies, args.seed,
                             args.parallel, args.timeout)
    print(format_result(result))
    print(f"{time.monotonic() - start:.0f} s; games as CSA in {Path(args.out) / arena.GAMES_DIR}, "
          f"summary in {Path(args.out) / arena.SUMMARY_JSON}")
    return 0
