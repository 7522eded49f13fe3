"""`shogi-dnn plan --data DIR --config TOML [--set ...] (--scaling-fit FIT | --fit devices=N,v0=..,t=.. ...
| --gpu NAME [--gpus N] [--cpus N]) [--price-per-hour P | N=P ...] [--devices 1,2,4,8] [--pipeline-rate
POS_PER_S [--target-cores N --this-cores M]] [--json] [--plot PNG]`: time and cost of one epoch and of the
configured run on each device count, from the dataset's manifest, the config and a throughput fit (`bench
scaling`), or before any fit an interval from a named GPU's published peaks (training/gpus.py), before
renting. No TensorFlow."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from shogi_dnn.config import load_config
from shogi_dnn.dataset import shards
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import gpus, plan, throughput


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shogi-dnn plan", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("--data", required=True, help="dataset folder written by `shogi-dnn convert`")
    parser.add_argument("--config", required=True, help="training config (TOML preset)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config key (repeatable)")
    parser.add_argument("--scaling-fit", default=None,
                        help="the JSON of `shogi-dnn bench scaling` (or inline v0=..,t=..[,devices=N])")
    parser.add_argument("--fit", action="append", default=[], metavar="devices=N,v0=V,t=T",
                        help="a declared fit for N devices (repeatable), e.g. "
                             "devices=1,v0=258,t=0.054 and devices=2,v0=514,t=0.15")
    parser.add_argument("--price-per-hour", action="append", default=[], metavar="P|N=P",
                        help="P: price per device-hour; N=P: price of the N-device machine per hour "
                             "(repeatable or comma-separated, e.g. 8=7.2)")
    parser.add_argument("--devices", default=",".join(map(str, plan.DEFAULT_DEVICES)),
                        help="device counts to plan for (default %(default)s)")
    parser.add_argument("--pipeline-rate", type=float, default=None, metavar="POS_PER_S",
                        help="input pipeline positions/s measured here "
                             "(`shogi-dnn bench train`'s pipeline figure)")
    parser.add_argument("--target-cores", type=int, default=0, help="CPU cores of the target machine")
    parser.add_argument("--this-cores", type=int, default=0,
                        help="CPU cores the pipeline rate was measured with (default: this machine's, "
                             "when --target-cores is given)")
    parser.add_argument("--gpu", default=None, metavar="NAME",
                        help="no fit yet: estimate from the published peaks of this GPU "
                             f"({', '.join(g.name for g in gpus.GPUS.values())})")
    parser.add_argument("--gpus", type=int, default=1, metavar="N", help="with --gpu: how many (default 1)")
    parser.add_argument("--cpus", type=int, default=0, metavar="N",
                        help="with --gpu: CPU cores of the machine (the input pipeline's ceiling)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON instead of the table")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="write time and cost against device count")
    return parser.parse_args(argv)


def read_fits(args: argparse.Namespace) -> dict[int, throughput.ThroughputFit]:
    fits = dict(throughput.load_fits(args.scaling_fit)) if args.scaling_fit else {}
    for spec in args.fit:
        fits.update(throughput.load_fits(spec))
    if not fits and not args.gpu:
        raise ConfigError("give a throughput fit: --scaling-fit FIT.json (from `shogi-dnn bench scaling`) or "
                          "--fit devices=N,v0=POSITIONS_PER_S,t=SECONDS (repeatable); before any "
                          "measurement, --gpu NAME [--gpus N] estimates from published figures")
    return fits


def parse_devices(text: str) -> list[int]:
    try:
        devices = [int(d) for d in text.split(",") if d.strip()]
    except ValueError as exc:
        raise ConfigError(f"--devices {text!r}: expected comma-separated counts, e.g. 1,2,4,8") from exc
    if not devices or min(devices) < 1:
        raise ConfigError(f"--devices {text!r}: counts must be >= 1")
    return devices


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    config = load_config(Path(args.config), args.set)
    fits = read_fits(args)
    per_device, per_count = plan.parse_prices(args.price_per_hour)
    if args.gpu and not fits:
        if args.plot:
            raise ConfigError("--plot draws a measured fit's curve (--scaling-fit or --fit); an estimate "
                              "from --gpu's published figures has none: drop --plot, or measure with "
                              "`shogi-dnn bench scaling` first")
        gpu = gpus.find_gpu(args.gpu)
        if args.cpus < 0:
            raise ConfigError(f"--cpus {args.cpus}: must be >= 0")
        estimate = plan.estimate_plan(shards.read_manifest(args.data), config, gpu, args.gpus,
                                      plan.machine_price(args.gpus, per_device, per_count), args.cpus)
        print(json.dumps(estimate.to_dict(), indent=2) if args.json else plan.format_estimate(estimate))
        return 0
    devices = parse_devices(args.devices)
    pipeline = None
    if args.pipeline_rate is not None:
        if not args.pipeline_rate > 0:
            raise ConfigError(f"--pipeline-rate {args.pipeline_rate}: must be positive")
        this = args.this_cores or (os.cpu_count() or 1 if args.target_cores else 0)
        if args.target_cores < 0 or this < 0:
            raise ConfigError("--target-cores and --this-cores must be positive")
        pipeline = plan.Pipeline(args.pipeline_rate, args.target_cores, this)
    result = plan.make_plan(shards.read_manifest(args.data), config, fits, devices, per_device, per_count,
                            pipeline)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(plan.format_plan(result))
    if args.plot:
        path = plan.plot_plan(result, args.plot)
        if not args.json:
            print(f"\nwrote {path}")
    return 0
