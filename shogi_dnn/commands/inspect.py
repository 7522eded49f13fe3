"""`shogi-dnn inspect PATH [--sfen] [--json] [--verify]`: summarise a dataset folder or one shard."""

from __future__ import annotations

import argparse
import json
import os
import sys

from shogi_dnn import inspection
from shogi_dnn.errors import ShardFormatError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shogi-dnn inspect",
        description="Games, positions, splits, label balance and endings of a dataset folder or one shard.")
    parser.add_argument("path", metavar="PATH", help="dataset folder (with manifest.json) or one .h5 shard")
    parser.add_argument("--sfen", action="store_true",
                        help="print SFEN<TAB>label<TAB>game<TAB>ply for every position of every split")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--verify", action="store_true", help="check every shard's sha256 against the manifest")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    refs = inspection.resolve(args.path)
    if args.verify:
        bad = inspection.verify(refs)
        if bad:
            raise ShardFormatError(f"{bad[0]} ({len(bad)} of {len(refs)} shards differ)")
    try:
        if args.sfen:
            for line in inspection.iter_sfen_lines(refs):
                sys.stdout.write(line + "\n")
            return 0
        summary = inspection.summarize(refs)
        if args.json:
            print(json.dumps(inspection.summary_dict(summary), indent=2, ensure_ascii=False))
        else:
            print(inspection.format_summary(args.path, summary))
            if args.verify:
                print(f"verified: {len(refs)} shards match the manifest")
    except BrokenPipeError:          # `inspect --sfen | head`: the reader went away; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # so the exit-time flush does not complain either
    return 0
