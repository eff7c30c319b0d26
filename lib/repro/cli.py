"""The ``repro`` command line.

``repro list``                     the chapters and their claims
``repro status``                   fresh/stale per profile and the last wall time
``repro run ID [--profile P] [-p k=v ...] [--dry-run]``
                                   execute a chapter with papermill
``repro dvc``                      regenerate ``dvc.yaml`` from the registry
``repro book [--profile P] [--course C] [--run]``
                                   assemble the book's sources (toc, chapters, scoreboard, status page),
                                   first running every chapter that is not fresh with ``--run``
``repro bundle ID [--profile P] [--wheels]``
                                   one archive that reruns a chapter on a machine with no network
``repro params ID [--profile P]``  a profile's values as YAML (``papermill ... -y "$(repro params ID)"``)
``repro data``                     build the datasets under ``data/`` and check them against ``data.dvc``
``repro reference [ID ...]``       write ``reference/<id>.json`` from the published cpu records
``repro check ID [--no-run]``      rerun a chapter at cpu; is every claim in its reference's 95% prediction interval?
"""

from __future__ import annotations

import argparse
import sys

import yaml

from repro import params
from repro.book import assemble, book_dir_for, course_registry, load_course
from repro.bundle import write_bundle
from repro.datasets import DataIntegrityError, build_all, verify
from repro.dvcgen import write_dvc_yaml
from repro.reference import REFERENCE_PROFILE, compare, load_reference, write_reference
from repro.registry import load_registry
from repro.results import load_result
from repro.runner import RunError, execute, plan, run_stale, status


def _cmd_list(args: argparse.Namespace) -> int:
    reg = load_registry()
    for fam, chapters in reg.by_family().items():
        print(f"{reg.families[fam]}")
        for ch in chapters:
            print(f"  {ch.id:<22} {ch.title}  ({len(ch.claims)} claims)")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    reg = load_registry()
    print(f"{'chapter':<22} " + " ".join(f"{p:<24}" for p in params.PROFILES))
    for ch in reg.chapters:
        st = status(ch)
        cells = []
        for p in params.PROFILES:
            s = st[p]
            wall = "" if s["wall_time_s"] is None else f" ({s['wall_time_s']:.0f} s)"
            cells.append(f"{s['state'] + wall:<24}")
        print(f"{ch.id:<22} " + " ".join(cells))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        p = plan(args.chapter, args.profile, args.param)
    except (KeyError, params.ParameterError, FileNotFoundError, DataIntegrityError) as exc:
        print(f"repro run: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        exp = "unknown (no recorded run at this profile)" if p.expected_s is None else f"about {p.expected_s:.0f} s"
        print(f"chapter {p.chapter.id} at profile {p.profile}; expected time {exp}")
        for k, v in p.values.items():
            print(f"  {k} = {v!r}")
        return 0
    try:
        rec = execute(p, args.param, log_output=args.verbose)
    except RunError as exc:
        print(f"repro run: {exc}", file=sys.stderr)
        return 1
    print(f"{p.chapter.id} [{p.profile}] finished in {rec['run']['wall_time_s']:.1f} s")
    for cid, c in rec["claims"].items():
        print(f"  {cid}: {c['mean']:.3g} ± {c['std']:.2g} over {c['n']} seeds -> {c['verdict']}")
    return 0


def _cmd_dvc(args: argparse.Namespace) -> int:
    path = write_dvc_yaml()
    print(f"wrote {path}")
    return 0


def _cmd_book(args: argparse.Namespace) -> int:
    try:
        chapters = list(load_registry().chapters if args.course is None else course_registry(load_course(args.course)).chapters)
    except ValueError as exc:
        print(f"repro book: {exc}", file=sys.stderr)
        return 2
    failed = []
    if args.run:
        failed = [o.chapter for o in run_stale(chapters, args.profile) if o.action == "failed"]
    lines = assemble(profile=args.profile, course=args.course)
    if args.verbose:
        print("\n".join(lines))
    print(f"book sources: {book_dir_for(args.course)}")
    if failed:
        print(f"repro book: chapters failed at {args.profile}: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _cmd_bundle(args: argparse.Namespace) -> int:
    try:
        b = write_bundle(args.chapter, args.profile, wheels=args.wheels, out=args.out)
    except (KeyError, params.ParameterError, DataIntegrityError, RuntimeError) as exc:
        print(f"repro bundle: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    extra = f", {b.wheels} wheels" if args.wheels else " (no third-party wheels: the target needs the registries)"
    print(f"wrote {b.archive}: {len(b.members)} files{extra}; unpack it and run `bash {b.chapter}/run.sh`")
    return 0


def _cmd_params(args: argparse.Namespace) -> int:
    try:
        values = params.resolve(load_registry().get(args.chapter), args.profile)
    except (KeyError, params.ParameterError) as exc:
        print(f"repro params: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(values, sort_keys=False, default_flow_style=None).rstrip())
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    for p in build_all():
        print(f"ready: {p}")
    try:
        verify()
    except DataIntegrityError as exc:
        print(f"repro data: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_reference(args: argparse.Namespace) -> int:
    ids = args.chapters or [c.id for c in load_registry().chapters]
    failed = []
    for cid in ids:
        try:
            print(f"wrote {write_reference(cid)}")
        except (KeyError, FileNotFoundError, ValueError) as exc:
            failed.append(cid)
            print(f"repro reference: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_check(args: argparse.Namespace) -> int:
    if args.profile != REFERENCE_PROFILE:
        print(f"repro check: references are {REFERENCE_PROFILE} records; --profile {args.profile} has none",
              file=sys.stderr)
        return 2
    try:
        reference = load_reference(load_registry().get(args.chapter).id)
    except KeyError as exc:
        print(f"repro check: {exc.args[0]}", file=sys.stderr)
        return 2
    if reference is None:
        print(f"repro check: {args.chapter} has no reference record; write one with `repro reference {args.chapter}`",
              file=sys.stderr)
        return 2
    if args.no_run:
        record = load_result(args.chapter, args.profile)
        if record is None:
            print(f"repro check: {args.chapter} has no published {args.profile} record", file=sys.stderr)
            return 2
    else:
        try:
            record = execute(plan(args.chapter, args.profile))
        except (params.ParameterError, DataIntegrityError, RunError) as exc:
            print(f"repro check: {exc}", file=sys.stderr)
            return 1
    checks = compare(reference, record)
    print(f"{args.chapter} [{args.profile}] against reference/{args.chapter}.json "
          f"(commit {reference['git_sha'][:12]}, {reference['finished_at']}):")
    for c in checks:
        print(c.line())
    left = [c.claim for c in checks if not c.inside]
    if left:
        print(f"repro check: {len(left)} claim(s) left the reference interval: {', '.join(left)}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``repro`` command."""
    ap = argparse.ArgumentParser(prog="repro", description="Run and assemble ReproBook chapters.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list chapters").set_defaults(fn=_cmd_list)
    sub.add_parser("status", help="fresh or stale per chapter and profile").set_defaults(fn=_cmd_status)
    r = sub.add_parser("run", help="execute a chapter notebook")
    r.add_argument("chapter")
    r.add_argument("--profile", default=params.DEFAULT_PROFILE, choices=params.PROFILES)
    r.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a parameter (value read as YAML); repeatable")
    r.add_argument("--dry-run", action="store_true", help="validate and print the plan and expected time")
    r.add_argument("-v", "--verbose", action="store_true", help="stream the notebook's output")
    r.set_defaults(fn=_cmd_run)
    sub.add_parser("dvc", help="regenerate dvc.yaml from the registry").set_defaults(fn=_cmd_dvc)
    b = sub.add_parser("book", help="assemble the book sources from executed chapters")
    b.add_argument("--profile", default=params.DEFAULT_PROFILE, choices=params.PROFILES)
    b.add_argument("--course", default=None, help="a course in book/courses/<name>.yaml: only its chapters")
    b.add_argument("--run", action="store_true", help="first run every chapter in the book that is not fresh")
    b.add_argument("-v", "--verbose", action="store_true", help="list every file written")
    b.set_defaults(fn=_cmd_book)
    bu = sub.add_parser("bundle", help="write one archive that reruns a chapter offline")
    bu.add_argument("chapter")
    bu.add_argument("--profile", default="smoke", choices=params.PROFILES)
    bu.add_argument("--wheels", action="store_true", help="pack every wheel of the lock for this platform")
    bu.add_argument("--out", default=None, help="the archive's path (default build/bundles/<id>-<profile>.tar.gz)")
    bu.set_defaults(fn=_cmd_bundle)
    pa = sub.add_parser("params", help="print a chapter's profile as YAML (for papermill -y)")
    pa.add_argument("chapter")
    pa.add_argument("--profile", default=params.DEFAULT_PROFILE, choices=params.PROFILES)
    pa.set_defaults(fn=_cmd_params)
    sub.add_parser("data", help="build the datasets under data/").set_defaults(fn=_cmd_data)
    ref = sub.add_parser("reference", help="write reference/<id>.json from the published cpu records")
    ref.add_argument("chapters", nargs="*", help="chapter ids (default: every chapter)")
    ref.set_defaults(fn=_cmd_reference)
    ck = sub.add_parser("check", help="rerun a chapter and test it against its reference record")
    ck.add_argument("chapter")
    ck.add_argument("--profile", default=REFERENCE_PROFILE, choices=params.PROFILES)
    ck.add_argument("--no-run", action="store_true", help="check the published record instead of rerunning")
    ck.set_defaults(fn=_cmd_check)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``repro`` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except KeyboardInterrupt:
        print(f"repro {args.cmd}: interrupted; nothing was published", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
