"""The fidelity corpus: real record files from public repositories, the expected result of each game
from an independent reader, and the agreement table of our readers against it.

  python scripts/fidelity_corpus.py build  [--out DIR]      copy the files listed in the manifest into DIR
  python scripts/fidelity_corpus.py expect [--corpus DIR]   (re)write EXPECTED.tsv with cshogi / python-shogi
  python scripts/fidelity_corpus.py table  [--corpus DIR]   our readers against EXPECTED.tsv: the table
  python scripts/fidelity_corpus.py manifest --add          add EXTRA_SOURCES' files to MANIFEST.tsv

`expect` asks cshogi, then python-shogi, then json-kifu-format (Kifu for JS's parser, run by node from
$FIDELITY_JKF, a node_modules folder: `npm install json-kifu-format@5.5.0`; without it that peer is
skipped and the files only it reads are `unreadable`).

Files come from /work/shared/kifu (SOURCES.tsv: repository, commit, path) and from git mirrors
(`fetch`ed snapshots under /work/.mirror); tests/data/fidelity/MANIFEST.tsv lists every file
(repository, commit, path, sha256, format, license) and `build` rebuilds the corpus from either place,
checking each sha256. The files are not kept in this repository (most of their licenses do not allow
it); tests/kifu/test_fidelity.py runs against DIR when it is present and skips otherwise.

Expected values (EXPECTED.tsv, one row a game): the move count, winner and ending an independent
reader gives: cshogi (CSA, KIF, KI2), else python-shogi, as it reads them (`basis`; `unreadable` with
the peer's error in `note`). Where the peer is wrong (read by hand: cshogi's KIF reader takes the result
from a `まで` line only, appends variations to the main line, checks no legality, ...), OVERRIDES.tsv
names the game, the peer's reading, the record's own reading and why; `table` and the test compare ours
with the record's reading there and with the peer's everywhere else, and report overrides gone stale.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "data" / "fidelity"
MANIFEST = HERE / "MANIFEST.tsv"
EXPECTED = HERE / "EXPECTED.tsv"
DEFAULT_CORPUS = ROOT / "datasets" / "raw" / "fidelity"
SHARED = Path("/work/shared/kifu")
MIRRORS = Path("/work/.mirror")
SUFFIXES = {".csa": "csa", ".kif": "kif", ".kifu": "kif", ".ki2": "ki2", ".ki2u": "ki2"}
# Snapshots added beyond /work/shared/kifu: (repository, git directory under MIRRORS, license).
EXTRA_MIRRORS = [
    ("sunfish-shogi/electron-shogi", "sunfish-shogi+electron-shogi/repo", "MIT"),
    ("shogi-server/shogi-server", "shogi-server+shogi-server/repo", "GPL-2.0"),
    ("sunfish-shogi/tsshogi", "sunfish-shogi+tsshogi/repo", "MIT"),
    ("TadaoYamaoka/cshogi", "TadaoYamaoka+cshogi/repo", "GPL-3.0"),
    ("gunyarakun/python-shogi", "gunyarakun+python-shogi/repo", "GPL-3.0"),
]
# Sources added by `manifest --add` (issue 32: writers and encodings the first 260 files lacked):
# (repository, license, whole history or HEAD only, path pattern, keep every n-th file in path order).
# Each record file's newest version in the history is taken once (identical bytes once in the manifest).
EXTRA_SOURCES = [
    ("na2hiro/Kifu-for-JS", "MIT", False, r"", 1),                   # Kifu for Windows, floodgate, KI2
    ("sunfish-shogi/shogihome", "MIT", False, r"", 1),               # ShogiHome's own writer (CSA bridge)
    ("muzudho/kif-parser", "MIT", True, r"", 1),                     # ShogiGUI, Shogidokoro, floodgate, Wars
    ("iwate-shogikan/kifu", "MIT text (its LICENSE names GitHub, Inc.)", True, r"", 40),  # a club's games
    ("sunfish-shogi/sunfish4", "MIT", True, r"kifu/learn/", 1),      # professional games, CSA
    ("sp6/sakura", "unknown", True, r"", 1),                         # denou server CSA
    ("NyaanNyaan/KIFtoMD", "unknown", True, r"", 1),                 # 柿木将棋IX
    ("kota/kifushare", "unknown", True, r"", 1),                     # Kifu for Macintosh
]
MANIFEST_FIELDS = ["repo", "commit", "path", "sha256", "format", "license", "local"]
EXPECTED_FIELDS = ["local", "game", "moves", "winner", "ending", "basis", "note"]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _git_blob(gitdir: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(gitdir), "show", f"{commit}:{path}"], check=True,
                          capture_output=True).stdout


def make_manifest() -> list[dict[str, str]]:
    """Every record file of the shared folder and the extra mirrors, identical bytes once."""
    rows, seen = [], set()
    with open(SHARED / "SOURCES.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            fmt = SUFFIXES.get(Path(row["local_path"]).suffix.lower())
            if fmt is None:
                continue
            data = (SHARED / row["local_path"]).read_bytes()
            digest = _sha256(data)
            if digest in seen:
                continue
            seen.add(digest)
            rows.append({"repo": row["repo"], "commit": row["commit"], "path": row["path_in_repo"],
                         "sha256": digest,
                         "format": fmt, "license": row["license_note"], "local": row["local_path"]})
    for repo, gitdir, licence in EXTRA_MIRRORS:
        git = MIRRORS / gitdir
        if not git.exists():
            continue
        commit = subprocess.run(["git", "-C", str(git), "rev-parse", "HEAD"], check=True, capture_output=True,
                                text=True).stdout.strip()
        names = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", "--name-only", commit], check=True,
                               capture_output=True, text=True).stdout.splitlines()
        for name in names:
            fmt = SUFFIXES.get(Path(name).suffix.lower())
            if fmt is None or "node_modules" in name:
                continue
            data = _git_blob(git, commit, name)
            digest = _sha256(data)
            if digest in seen:
                continue
            seen.add(digest)
            rows.append({"repo": repo, "commit": commit, "path": name, "sha256": digest, "format": fmt,
                         "license": licence, "local": repo.replace("/", "__") + "/" + name})
    return rows


def _history_files(git: Path, history: bool) -> dict[str, tuple[str, str]]:
    """Record files of a mirror: blob id -> (commit, path), the newest commit first (HEAD only unless
    `history`)."""
    commits = subprocess.run(["git", "-C", str(git), "log", "--format=%H"] + ([] if history else ["-1"]),
                             check=True, capture_output=True, text=True).stdout.split()
    blobs: dict[str, tuple[str, str]] = {}
    for commit in commits:
        listing = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", "-z", commit], check=True,
                                 capture_output=True).stdout.decode("utf-8", "surrogateescape")
        for entry in filter(None, listing.split("\0")):
            meta, path = entry.split("\t", 1)
            if SUFFIXES.get(Path(path).suffix.lower()) and "node_modules" not in path:
                blobs.setdefault(meta.split()[2], (commit, path))
    return blobs


def add_sources(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """`rows` plus the files of EXTRA_SOURCES not yet in them (by sha256); existing rows are kept as they
    are, so that a re-fetched mirror does not move their commits."""
    import re
    seen = {row["sha256"] for row in rows}
    taken = {row["local"] for row in rows}
    out = list(rows)
    for repo, licence, history, pattern, every in EXTRA_SOURCES:
        git = MIRRORS / repo.replace("/", "+") / "repo"
        if not git.exists():
            print(f"not fetched: {repo}", file=sys.stderr)
            continue
        files = sorted(_history_files(git, history).items(), key=lambda item: (item[1][1], item[1][0]))
        files = [f for f in files if re.search(pattern, f[1][1])][::every]
        for blob, (commit, path) in files:
            data = subprocess.run(["git", "-C", str(git), "cat-file", "-p", blob], check=True,
                                  capture_output=True).stdout
            digest = _sha256(data)
            if digest in seen:
                continue
            seen.add(digest)
            local = repo.replace("/", "__") + "/" + path
            if local in taken:
                local = repo.replace("/", "__") + f"/{commit[:8]}/" + path
            taken.add(local)
            out.append({"repo": repo, "commit": commit, "path": path, "sha256": digest,
                        "format": SUFFIXES[Path(path).suffix.lower()], "license": licence, "local": local})
    return out


def read_manifest() -> list[dict[str, str]]:
    with open(MANIFEST, encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def build(out: Path) -> int:
    """Copy every manifest file into `out` (from the shared folder, else a mirror), sha256 checked."""
    missing = 0
    for row in read_manifest():
        target = out / row["local"]
        data = None
        if (SHARED / row["local"]).exists():
            data = (SHARED / row["local"]).read_bytes()
        else:
            git = MIRRORS / row["repo"].replace("/", "+") / "repo"
            if git.exists():
                try:
                    data = _git_blob(git, row["commit"], row["path"])
                except subprocess.CalledProcessError:
                    data = None
        if data is None or _sha256(data) != row["sha256"]:
            missing += 1
            print(f"missing or changed: {row['repo']} {row['path']}", file=sys.stderr)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    print(f"{out}: {len(read_manifest()) - missing} files ({missing} missing)")
    return 1 if missing else 0


# --- the independent reader ------------------------------------------------------------------------

_CSA_ENDINGS = {"%TORYO": "resign", "%TSUMI": "checkmate", "%SENNICHITE": "sennichite",
                "%OUTE_SENNICHITE": "oute_sennichite", "%KACHI": "entering_king", "%JISHOGI": "jishogi",
                "%HIKIWAKE": "draw", "%MAX_MOVES": "max_moves", "%TIME_UP": "time_up",
                "%ILLEGAL_MOVE": "illegal_move", "%+ILLEGAL_ACTION": "illegal_move",
                "%-ILLEGAL_ACTION": "illegal_move", "%CHUDAN": "interrupted", "%MATTA": "matta",
                "%ERROR": "interrupted", "%FUZUMI": "interrupted"}


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for encoding in ("utf-8", "cp932", "euc-jp"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "replace")


def independent_games(fmt: str, text: str) -> list[tuple[int, str, str, str]]:
    """(moves, winner, ending, basis) of each game by cshogi; raises when it cannot read the file."""
    import cshogi
    winners = {cshogi.BLACK_WIN: "black", cshogi.WHITE_WIN: "white", cshogi.DRAW: "draw"}
    if fmt == "csa":
        from cshogi import CSA
        games = CSA.Parser.parse_str(text)
        out = []
        for game in games:
            ending = _CSA_ENDINGS.get(game.endgame, "none" if not game.endgame else game.endgame)
            winner = winners.get(game.win, "unknown") if game.endgame in (
                "%TORYO", "%TSUMI", "%TIME_UP", "%ILLEGAL_MOVE", "%+ILLEGAL_ACTION", "%-ILLEGAL_ACTION",
                "%KACHI",
                "%SENNICHITE", "%JISHOGI", "%HIKIWAKE", "%MAX_MOVES") else "unknown"
            out.append((len(game.moves), winner, ending, "cshogi"))
        return out
    if fmt == "kif":
        from cshogi import KIF
        game = KIF.Parser.parse_str(text)
        winner = winners.get(game.win, "unknown") if game.win is not None else "unknown"
        return [(len(game.moves), winner, _CSA_ENDINGS.get(game.endgame or "", "none"), "cshogi")]
    from cshogi import KI2
    game = KI2.Parser.parse_str(text)
    winner = winners.get(game.win, "unknown") if game.win is not None else "unknown"
    return [(len(game.moves), winner, _CSA_ENDINGS.get(game.endgame or "", "none"), "cshogi")]


def _peer_rows(corpus: Path, entries: list[dict[str, str]], crashed: bool = False) -> list[dict] | None:
    """The peer's rows for `entries`, read in a child process (cshogi crashes on some malformed
    files: a crash must not end the run); None when the child died. `crashed`: cshogi crashed on
    this file: the child skips it and asks the other peers."""
    import json
    import os
    args = [sys.executable, __file__, "--corpus", str(corpus), "peer", *(e["local"] for e in entries)]
    env = {**os.environ, "FIDELITY_CSHOGI_CRASHED": "1"} if crashed else None
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return None
    return [json.loads(line) for line in done.stdout.splitlines()]


def peer(corpus: Path, locals_: list[str]) -> int:
    """Print the peer's rows for some files, one JSON object a line (the child side of _peer_rows)."""
    import json
    import os
    formats = {e["local"]: e["format"] for e in read_manifest()}
    for local in locals_:
        data = (corpus / local).read_bytes()
        text, why, games = _decode(data), "", None
        for name, reader in (("cshogi", independent_games), ("python-shogi", python_shogi_games),
                             ("json-kifu-format", jkf_games)):
            if name == "cshogi" and os.environ.get("FIDELITY_CSHOGI_CRASHED"):
                why = "cshogi crashed (segmentation fault)"
                continue
            try:
                games = reader(formats[local], text)
                break
            except Exception as exc:  # noqa: BLE001 - any failure of a peer is recorded, not raised
                why = (why + "; " if why else "") + f"{name}: {type(exc).__name__}: {str(exc)[:80]}"
        if games is None:
            print(json.dumps({"local": local, "game": 0, "moves": -1, "winner": "", "ending": "",
                              "basis": "unreadable", "note": why}))
            continue
        for index, (moves, winner, ending, basis) in enumerate(games):
            print(json.dumps({"local": local, "game": index, "moves": moves, "winner": winner,
                              "ending": ending, "basis": basis, "note": why}))
    return 0


def python_shogi_games(fmt: str, text: str) -> list[tuple[int, str, str, str]]:
    """(moves, winner, ending, basis) by python-shogi (CSA and KIF), the second peer."""
    import shogi.CSA
    import shogi.KIF
    winners = {"b": "black", "w": "white", "-": "draw", None: "unknown"}
    if fmt == "csa":
        games = shogi.CSA.Parser.parse_str(text)
    elif fmt == "kif":
        games = shogi.KIF.Parser.parse_str(text)
    else:
        raise ValueError("python-shogi reads no KI2")
    return [(len(g["moves"]), winners.get(g["win"], "unknown"), "", "python-shogi") for g in games]


JKF_SPECIAL = {"TORYO": "resign", "TSUMI": "checkmate", "TIME_UP": "time_up", "KACHI": "entering_king",
               "CHUDAN": "interrupted", "SENNICHITE": "sennichite", "JISHOGI": "jishogi", "HIKIWAKE": "draw",
               None: "none"}


def jkf_games(fmt: str, text: str) -> list[tuple[int, str, str, str]]:
    """(moves, winner, ending, basis) by json-kifu-format (Kifu for JS's parser), the third peer, run by
    node (scripts/fidelity_jkf_peer.js) from the node_modules folder $FIDELITY_JKF. It names the ending
    (`special`), not the winner: TORYO/TSUMI/TIME_UP lose for the side to move, KACHI wins for it; other
    endings (fouls, whose side JKF leaves to the reader) give no winner."""
    import json
    import os
    modules = os.environ.get("FIDELITY_JKF")
    if not modules:
        raise RuntimeError("FIDELITY_JKF (a node_modules folder with json-kifu-format) is not set")
    done = subprocess.run(["node", str(ROOT / "scripts" / "fidelity_jkf_peer.js"), fmt], input=text,
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "NODE_PATH": modules})
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if "error" in got or got["special"] not in JKF_SPECIAL:
        raise ValueError(got.get("error") or f"special {got['special']} not compared")
    white_first = got["preset"] not in (None, "HIRATE", "OTHER") or (got["preset"] == "OTHER"
                                                                       and got["initialColor"] == 1)
    mover = "white" if (got["moves"] % 2 == 1) != white_first else "black"
    other = "black" if mover == "white" else "white"
    special = got["special"]
    winner = (other if special in ("TORYO", "TSUMI", "TIME_UP") else mover if special == "KACHI"
              else "draw" if special in ("SENNICHITE", "JISHOGI", "HIKIWAKE") else "unknown")
    return [(got["moves"], winner, JKF_SPECIAL[special], "json-kifu-format")]


def expect(corpus: Path) -> int:
    """Write EXPECTED.tsv: each game's move count, winner and ending by the independent reader."""
    rows: list[dict] = []
    entries = read_manifest()
    for start in range(0, len(entries), 40):
        chunk = entries[start:start + 40]
        got = _peer_rows(corpus, chunk)
        if got is None:                       # one file crashed the peer: read them one by one
            got = []
            for entry in chunk:
                one = _peer_rows(corpus, [entry]) or _peer_rows(corpus, [entry], crashed=True)
                got += one if one is not None else [{
                    "local": entry["local"], "game": 0, "moves": -1, "winner": "", "ending": "",
                    "basis": "unreadable", "note": "cshogi crashed (segmentation fault)"}]
        rows += got
    write_tsv(EXPECTED, EXPECTED_FIELDS, rows)
    print(f"{EXPECTED}: {len(rows)} games")
    return 0


OVERRIDES = HERE / "OVERRIDES.tsv"


def write_tsv(path: Path, fields: list[str] | tuple[str, ...], rows: list[dict]) -> None:
    """rows as a tab-separated table with a header line (MANIFEST.tsv, EXPECTED.tsv)."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fields, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)



# --- our readers against it ------------------------------------------------------------------------

def ours(corpus: Path, entry: dict[str, str]) -> list[tuple[int, str, str] | str]:
    """Each game of the file as convert keeps it: read, then the fourfold-repetition rule applied
    (kifu.repetition.settle: played-on games cut, perpetual check relabelled, unconfirmed 千日手 claims
    refused), as `(moves, winner, ending)`, or `error: <reason>` for a refused game."""
    from shogi_dnn.errors import KifuError
    from shogi_dnn.kifu import read_record_bytes, repetition
    from shogi_dnn.kifu.record import GameRecord
    from shogi_dnn.rules import new_position
    out: list[tuple[int, str, str] | str] = []
    for item in read_record_bytes((corpus / entry["local"]).read_bytes(), entry["local"]):
        if not isinstance(item, GameRecord):
            out.append(f"error: {item.reason}")
            continue
        position = new_position(item.start_sfen)
        keys = [position.sfen().rsplit(" ", 1)[0]]
        for move in item.moves:
            position.push_usi(move)
            keys.append(position.sfen().rsplit(" ", 1)[0])
        try:
            item = repetition.settle(item, repetition.fourfold_index(keys)).record
        except KifuError as exc:
            out.append(f"error: {exc.reason}")
            continue
        out.append((len(item.moves), item.winner.value, item.ending.value))
    return out


OVERRIDE_FIELDS = ["local", "game", "reader", "field", "peer", "truth", "reason"]


def read_overrides() -> dict[tuple[str, int], dict[str, str]]:
    """OVERRIDES.tsv: the games where the peer's reading is wrong, by hand. Each row names the file and
    game, the peer (`reader`), the fields it gets wrong, its reading (`peer`: `moves winner ending`,
    as EXPECTED.tsv has it), the record's own reading (`truth`: `moves winner ending`, or
    `refused: <words of our error>` for a file that is no game by the rules) and why (`reason`)."""
    if not OVERRIDES.exists():
        return {}
    with open(OVERRIDES, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    out = {}
    for line, row in enumerate(rows, start=2):
        if any(not row.get(field) for field in OVERRIDE_FIELDS):
            raise ValueError(f"{OVERRIDES}:{line}: every column must be filled "
                             f"({', '.join(OVERRIDE_FIELDS)})")
        out[(row["local"], int(row["game"]))] = row
    return out


def _reading(values: tuple[int, str, str] | list) -> str:
    return " ".join(str(v) for v in values)


def _truth_agrees(truth: str, got: tuple[int, str, str] | str) -> bool:
    if truth.startswith("refused: "):
        return isinstance(got, str) and got.startswith("error:") and truth[len("refused: "):] in got
    return not isinstance(got, str) and _reading(got) == truth


def compare(corpus: Path) -> dict:
    """files, games, agreed (with the peer as it reads), overridden (the peer wrong, ours as the record
    says by hand: OVERRIDES.tsv), every disagreement left and every override that no longer applies."""
    with open(EXPECTED, encoding="utf-8") as handle:
        expected = list(csv.DictReader(handle, delimiter="\t"))
    by_file: dict[str, list[dict]] = {}
    for row in expected:
        by_file.setdefault(row["local"], []).append(row)
    entries = {e["local"]: e for e in read_manifest()}
    overrides = read_overrides()
    games = agreed = overridden = 0
    disagreements, stale = [], []
    for local, rows in by_file.items():
        mine = ours(corpus, entries[local])
        for row in rows:
            if row["basis"] == "unreadable":
                continue
            games += 1
            index = int(row["game"])
            got = mine[index] if index < len(mine) else "missing"
            want = (int(row["moves"]), row["winner"], row["ending"])
            fix = overrides.pop((local, index), None)
            if fix is not None:
                if fix["peer"] == _reading(want) and _truth_agrees(fix["truth"], got):
                    overridden += 1
                    continue
                stale.append({"local": local, "game": index, "peer": want, "ours": got, "override": fix})
            if isinstance(got, tuple) and got[:2] == want[:2] and _same_ending(want[2], got[2]):
                agreed += 1
            else:
                disagreements.append({"local": local, "game": index, "expected": want, "ours": got,
                                      "basis": row["basis"], "note": row["note"]})
    stale += [{"local": local, "game": index, "override": fix, "peer": None, "ours": None}
              for (local, index), fix in overrides.items()]
    return {"files": len(by_file), "games": games, "agreed": agreed, "overridden": overridden,
            "disagreements": disagreements, "stale_overrides": stale,
            "unreadable_by_peer": sum(r["basis"] == "unreadable" for r in expected)}


def _same_ending(want: str, got: str) -> bool:
    """Endings the peer cannot tell apart count as the same (cshogi's KIF reader names only %TORYO,
    %KACHI, %ILLEGAL_MOVE/ACTION, %CHUDAN, %SENNICHITE from the summary line)."""
    if want in (got, ""):                 # "": python-shogi names no ending
        return True
    return want in ("resign", "none") and got in ("resign", "checkmate", "time_up", "none", "jishogi",
                                                  "max_moves", "forfeit")


def table(corpus: Path) -> int:
    result = compare(corpus)
    print(f"files {result['files']}  games {result['games']}  agreed {result['agreed']}  "
          f"overridden {result['overridden']}  disagree {len(result['disagreements'])}  "
          f"stale overrides {len(result['stale_overrides'])}  "
          f"(peer could not read {result['unreadable_by_peer']} files)")
    for d in result["disagreements"]:
        why = d["basis"] + (": " + d["note"] if d["note"] else "")
        print(f"  {d['local']}#{d['game']}: expected {d['expected']} ({why})"
              f"  ours {d['ours']}")
    for d in result["stale_overrides"]:
        print(f"  stale override {d['local']}#{d['game']}: peer {d['peer']}  ours {d['ours']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["manifest", "build", "expect", "table", "peer"])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--corpus", "--out", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--add", action="store_true",
                        help="manifest: keep its rows, add EXTRA_SOURCES' files")
    args = parser.parse_args(argv)
    if args.action == "manifest":
        rows = add_sources(read_manifest()) if args.add else make_manifest()
        write_tsv(MANIFEST, MANIFEST_FIELDS, rows)
        print(f"{MANIFEST}: {len(rows)} files from {len({r['repo'] for r in rows})} repositories")
        return 0
    if args.action == "build":
        return build(args.corpus)
    if args.action == "peer":
        return peer(args.corpus, args.files)
    if args.action == "expect":
        return expect(args.corpus)
    return table(args.corpus)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
