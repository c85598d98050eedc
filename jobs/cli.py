"""``rmq-recon``: the command line of spec §6 (the DAG tasks call the same functions)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from typing import Any, Callable, NoReturn


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, default=str))


def _progress(line: str) -> None:
    from jobs.lake import interrupts

    interrupts.say(line)


def cmd_simulate(a: argparse.Namespace) -> int:
    from jobs import simulate

    _print_json(simulate.run(a.scenario, a.out, seed=a.seed, scale=a.scale, bulk_messages=a.bulk_messages,
                             hours=a.hours, rate=a.rate, every=a.every, bulk_brokers=a.bulk_brokers,
                             progress=_progress))
    return 0


def cmd_ingest(a: argparse.Namespace) -> int:
    from jobs.ingest import ingest

    _print_json(ingest.run(a.landing, a.lake, snapshot_glob=a.snapshots, progress=_progress, settle_s=a.settle_s,
                           require_marker=a.require_marker or None, retake=a.retake))
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    """One snapshot folder in the export layout, written from the host's own store (issue 37)."""
    from jobs import export
    from jobs.problems import UsageError

    export.host_process()

    ts = None
    if a.snapshot_ts:  # (not reconcile's parser: the host needs no pandas or Spark)
        from jobs.export import layout

        ts = layout.snapshot_ts_option(a.snapshot_ts)
    if bool(a.store) == bool(a.client_offsets):
        raise UsageError("export: give --store <broker store folder> (with --broker) or --client-offsets <folder>")
    if a.store and not a.broker:
        raise UsageError("export --store: --broker <brokerName> is required")
    from jobs.export import loop

    reship_after_s = loop.parse_every(a.reship_after, "--reship-after")

    def export_at(at: Any) -> dict[str, Any]:
        if a.store:
            from jobs.export import store

            m = store.export_store(a.store, a.to, cluster=a.cluster, broker=a.broker, snapshot_ts=at,
                                   state_dir=a.state, reship_after_s=reship_after_s, say=_progress)
            return {k: m[k] for k in ("cluster", "broker", "snapshot_ts", "counts", "parts", "cpu_s")}
        from jobs.export import clients

        return clients.export_clients(a.client_offsets, a.to, cluster=a.cluster, snapshot_ts=at, say=_progress)

    if a.every is None:
        _print_json(export_at(ts))
        return 0
    if ts is not None:
        raise UsageError("export --every: the loop names each folder by its tick; leave out --snapshot-ts")
    loop.run_every(export_at, loop.parse_every(a.every), say=_progress)
    return 0


def cmd_reconcile(a: argparse.Namespace) -> int:
    from jobs.reconcile import reconcile

    groups = [g for g in (a.groups or "").split(",") if g] or None
    summary = reconcile.run(a.lake, a.reports, as_of=a.as_of, run_id=a.run_id, window=a.window, groups=groups,
                            dlq_warn_retries=a.dlq_warn_retries, blocking_min_age_s=a.blocking_min_age,
                            full=a.full, retention_h=a.retention_h, progress=_progress)
    _print_json(summary)
    return 0


def cmd_dashboard(a: argparse.Namespace) -> int:
    from jobs.ops import dashboard

    _print_json(dashboard.run(a.lake, a.reports, run_id=a.run_id, recent_runs=a.runs, progress=_progress))
    return 0


def cmd_validate(a: argparse.Namespace) -> int:
    """Exit 0 when every suite passed, 1 when one failed (one line naming each table and expectation)."""
    from jobs.ops import quality

    summary = quality.validate_layer(a.lake, a.layer, run_id=a.run_id, fail=False, progress=_progress)
    _print_json(summary)
    if not summary["success"]:
        print(f"rmq-recon validate: {a.layer} validation of {summary['validation_id']} failed: "
              + "; ".join(summary["failures"]), file=sys.stderr, flush=True)
        return 1
    return 0


def cmd_maintain(a: argparse.Namespace) -> int:
    from jobs.ops import maintenance

    _print_json(maintenance.run(a.lake, retention_h=a.retention_h, gold_retention_days=a.gold_retention_days,
                                progress=_progress))
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from jobs import demo

    return demo.main(workdir=a.workdir, scenario=a.scenario, seed=a.seed, scale=a.scale)


def _window(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give 2 or more (default 10)") from None
    if n < 2:
        raise argparse.ArgumentTypeError(f"{n}: the status needs at least 2 snapshots; give 2 or more (default 10)")
    return n


def _count(what: str, default: int) -> Callable[[str], int]:
    """A whole number of at least 0 (``what`` names its unit for the message)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}; give 0 or more (default "
                                             f"{default})") from None
        if n < 0:
            raise argparse.ArgumentTypeError(f"{n}: a number of {what} cannot be negative; give 0 or more (default "
                                             f"{default})")
        return n

    return parse


def _as_of(text: str) -> str:
    from jobs.reconcile.reconcile import AS_OF_FORMATS, parse_as_of

    try:
        parse_as_of(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time; expected {AS_OF_FORMATS}") from None
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rmq-recon")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout without install
        return "unknown"


class OneLineParser(argparse.ArgumentParser):
    """An option error is one line (``rmq-recon reconcile: error: argument --window: ...``) and exit code 2."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from jobs.simulate import SCENARIO_NAMES

    p = OneLineParser(prog="rmq-recon", description="RocketMQ consumer-progress reconciliation")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"rmq-recon {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    s = sub.add_parser("simulate", help="write a simulated landing zone and its _truth/ reports")
    s.add_argument("--scenario", required=True, choices=SCENARIO_NAMES, metavar="NAME",
                   help="one of: " + ", ".join(SCENARIO_NAMES))
    s.add_argument("--out", required=True, help="landing zone to write (local dir)")
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--scale", type=int, default=1,
                   help="mixed: size multiplier, ~98k messages per unit (past 3: vectorised healthy bulk traffic)")
    s.add_argument("--bulk-messages", type=int, default=None,
                   help="mixed: this many bulk messages instead of the scale's")
    s.add_argument("--hours", type=int, default=None,
                   help="mixed: a soak over this many virtual hours (default 6)")
    s.add_argument("--rate", type=int, default=None,
                   help="mixed: bulk messages per virtual hour (the fleet is sized for that rate)")
    s.add_argument("--every", type=int, default=30, choices=[15, 30],
                   help="mixed: minutes between snapshots (15 or 30; default 30)")
    s.add_argument("--bulk-brokers", type=int, default=None,
                   help="mixed: the bulk traffic on this many brokers (default: one per 1 M messages of 6 hours)")
    s.set_defaults(func=cmd_simulate)

    s = sub.add_parser("ingest", help="landing zone -> bronze/silver Delta tables (incremental, idempotent)")
    s.add_argument("--landing", required=True, help="landing zone root: a folder or s3://bucket/prefix")
    s.add_argument("--lake", required=True, help="lake root: a folder or s3://bucket/prefix")
    s.add_argument("--snapshots", default=None, help="only snapshot folders matching this glob")
    s.add_argument("--settle-s", type=float, default=None,
                   help="take a snapshot folder without _SUCCESS once unchanged this long (default "
                        "RMQ_RECON_SNAPSHOT_SETTLE_S or 0)")
    s.add_argument("--require-marker", action="store_true", help="take only folders with the sync job's _SUCCESS")
    s.add_argument("--retake", action="store_true", help="take every complete folder again (ignore bronze/snapshots)")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("export", help="on a broker (or consumer) host: one snapshot folder of its store in the "
                                      "export layout (the records since the last export, decoded)")
    s.add_argument("--store", default=None, help="the broker's store folder (storePathRootDir: commitlog/, config/)")
    s.add_argument("--client-offsets", default=None,
                   help="a broadcast consumer's offsets folder (localOffsetStoreDir, e.g. ~/.rocketmq_offsets)")
    s.add_argument("--to", required=True, help="landing zone root: a folder or s3://bucket/prefix (credentials "
                                               "from the environment or the instance role)")
    s.add_argument("--cluster", required=True)
    s.add_argument("--broker", default=None, help="the broker's name (--store)")
    s.add_argument("--snapshot-ts", default=None, help="the folder's time (default now; ISO-8601 UTC or "
                                                       "YYYYMMDDTHHMMSSZ): replays a copied store history in order")
    s.add_argument("--state", default=None, help="the host state folder (default RMQ_RECON_EXPORT_STATE or "
                                                 "~/.local/state/rmq-recon/export)")
    s.add_argument("--every", default=None, help="keep running: export at every multiple of this interval (900, "
                                                 "15m, 1h; UTC), the start-up paid once")
    s.add_argument("--reship-after", default="24h",
                   help="ship a consume queue file whole again once its oldest piece is this old (default 24h): keep "
                        "a broker's landing folders at least this long, the later ones read pieces of them")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("reconcile", help="silver -> gold tables and a report folder")
    s.add_argument("--lake", required=True)
    s.add_argument("--reports", required=True, help="report root; the run writes <reports>/<run_id>/")
    s.add_argument("--as-of", default=None, type=_as_of,
                   help="ISO-8601 UTC or YYYYMMDDTHHMMSSZ; default: newest snapshot")
    s.add_argument("--run-id", default=None, help="default: asof-<YYYYMMDDTHHMMSSZ>")
    s.add_argument("--window", type=_window, default=10,
                   help="snapshots per queue for consumer status (default 10, at least 2)")
    s.add_argument("--groups", default=None, help="comma-separated consumer groups (default: all)")
    s.add_argument("--dlq-warn-retries", type=_count("retries", 3), default=3)
    s.add_argument("--blocking-min-age", type=_count("seconds", 900), default=900,
                   help="seconds (default 900 = consumeTimeout)")
    s.add_argument("--full", action="store_true",
                   help="recompute everything (investigation, backfill) instead of carrying the previous run's "
                        "final rows beyond the horizon")
    s.add_argument("--retention-h", type=float, default=None,
                   help="the horizon: the broker's fileReservedTime in hours (default RMQ_RECON_RETENTION_H or 72)")
    s.set_defaults(func=cmd_reconcile)

    s = sub.add_parser("dashboard", help="gold tables -> <reports>/dashboard/, a static site across runs")
    s.add_argument("--lake", required=True)
    s.add_argument("--reports", required=True, help="report root; the site goes to <reports>/dashboard/")
    s.add_argument("--run-id", default=None, help="the run the pages describe (default: the newest completed)")
    s.add_argument("--runs", type=int, default=30, help="how many recent runs the trends show (default 30)")
    s.set_defaults(func=cmd_dashboard)

    s = sub.add_parser("validate", help="run the expectation suites on what one run wrote (exit 1 when one fails)")
    s.add_argument("--lake", required=True)
    s.add_argument("--layer", required=True, choices=["silver", "gold"],
                   help="silver: the rows an ingest run added; gold: one reconcile run's rows")
    s.add_argument("--run-id", default=None,
                   help="the ingest (silver) or reconcile (gold) run; default: the newest completed one")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("maintain", help="compact small files and vacuum old versions (keeps what the ledgers read)")
    s.add_argument("--lake", required=True)
    s.add_argument("--retention-h", type=float, default=None,
                   help="hours a removed file is kept at least (default RMQ_RECON_VACUUM_RETENTION_H or 168); raised per "
                        "table to keep the versions the newest ledger rows name readable")
    s.add_argument("--gold-retention-days", type=float, default=None,
                   help="days a reconcile run's (and a validation's) gold rows are kept beyond the 30 newest runs "
                        "(default RMQ_RECON_GOLD_RETENTION_DAYS or 7); report folders are not touched")
    s.set_defaults(func=cmd_maintain)

    s = sub.add_parser("demo", help="simulate a fleet, run the Airflow DAGs on it, print the summary")
    s.add_argument("--workdir", default=os.environ.get("RMQ_RECON_DEMO_DIR", "var/demo"))
    s.add_argument("--scenario", default="mixed",
                   help="a simulator scenario (default mixed), or 'real' for the real broker stores of the tests")
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--scale", type=int, default=1)
    s.set_defaults(func=cmd_demo)
    return p


# Libraries whose debug logs print request headers (botocore's carry the access key id in Authorization): -v shows
# their INFO, not their DEBUG.
_CHATTY = ("botocore", "boto3", "s3transfer", "urllib3", "py4j", "aiobotocore", "fsspec", "s3fs")


class RedactSecrets(logging.Filter):
    """Keeps the S3 credentials out of every log line, whatever logs them: the values of the AWS key variables and
    anything shaped like an access key id are replaced by ``<redacted>``."""

    _KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b")

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        clean = self._KEY_ID.sub("<redacted>", text)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            value = os.environ.get(name, "")
            if len(value) >= 4:
                clean = clean.replace(value, "<redacted>")
        if clean != text:
            record.msg, record.args = clean, None
        return True


def _logging(verbose: bool) -> None:
    """Progress goes to stderr as plain lines; the log shows warnings (with -v, debug, libraries' INFO)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())
    if verbose:
        for name in _CHATTY:
            logging.getLogger(name).setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _logging(args.verbose)
    from jobs.lake.engine_config import RUST_LOG_DEFAULT, no_huge_pages

    os.environ.setdefault("RUST_LOG", RUST_LOG_DEFAULT)
    no_huge_pages()
    from jobs.lake import interrupts

    interrupts.install(args.command)
    try:
        return int(args.func(args) or 0)
    except interrupts.Interrupted as stop:
        interrupts.leave(stop.signum)
    except Exception as exc:  # noqa: BLE001 - one clear line for people, the traceback too with -v
        if args.verbose:
            import traceback

            traceback.print_exc()
        print(f"rmq-recon {args.command}: error: {' '.join(str(exc).split())[:2000]}", file=sys.stderr)
        return 2


def console() -> None:
    """The ``rmq-recon`` command: :func:`main`, then out without tearing the interpreter down. The exit handlers run
    and the streams are flushed, as at a normal exit; what is skipped is freeing, one by one, every object the run
    built (the landing zone's listing, the ledgers, the engine's client): 0.3 s of each ingest (bench_export)."""
    code = main()
    try:
        import atexit

        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console()
