"""`mlplat`: the project's command line.

    mlplat preview --stack NAME [--json PATH] [--markdown PATH] [--manifests DIR]
    mlplat preview --env ENV [--out DIR]      (both layers: ENV, then ENV-cluster)
    mlplat preview --stack NAME --against BASE.json [--diff-markdown PATH] [--diff-json PATH]
    mlplat preview --env ENV --against BASE_DIR [--out DIR]   (BASE_DIR/<stack>.json per layer)
    mlplat charts list | pull [--to DIR]
    mlplat bootstrap --account ID --region REGION --environment ENV [--repository OWNER/NAME]
    mlplat deploy --stack NAME [--preview] [--config NS:KEY=VALUE]   (the real engine, as CI runs it)
    mlplat pin [--dry-run] [--only NAME] [--update NAME]   (digests of unpinned images and charts)
    mlplat job render|submit --tenant T --name N --job FILE [--from CONFIGMAP] [--context CTX]

Exit codes: 0 no mandatory violation, 1 at least one (or an error the real engine would
raise), 2 bad input (unknown stack, invalid config, a base report that is unreadable, of
another stack or of another report version), 3 the preview itself failed. With `--against
... --detailed-exitcode`, 0 means no mandatory violation and no change against the base, 4
no mandatory violation and changes (1, 2 and 3 keep their meaning; 1 wins over 4). With
`--against ... --require-approval broadening`, 5 means no mandatory violation and a change
that broadens access (infra/preview/security.py): a security review is due (1, 2 and 3 win
over 5; 5 wins over 4).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
# `--detailed-exitcode`: passed, and the head differs from the base. Not 2, as terraform's
# -detailed-exitcode has it: 2 is bad input everywhere in mlplat.
EXIT_CHANGES = 4
# `--require-approval broadening`: passed, and the change broadens access.
EXIT_BROADENING = 5


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as for any bad input
        self.exit(EXIT_BAD_INPUT, f"mlplat: {message} (see mlplat --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mlplat", description="Sovereign ML platform tooling")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    preview = sub.add_parser(
        "preview",
        help="preview a stack offline: the program under mocks, judged by the real policy pack",
    )
    which = preview.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", help="one stack, of either layer: stacks/Pulumi.<stack>.yaml (prod is the "
                                       "cloud layer, prod-cluster the cluster layer)")
    which.add_argument("--env", help="both layers of an environment, the cloud layer first; reports go to --out")
    preview.add_argument("--out", type=Path, metavar="DIR", help="with --env: write <stack>.json, <stack>.md and "
                                                               "<stack>-manifests/ for each layer here")
    preview.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here")
    preview.add_argument("--markdown", type=Path, metavar="PATH", help="write the Markdown report here")
    preview.add_argument("--manifests", type=Path, metavar="DIR", help="write Kubernetes objects as YAML here")
    preview.add_argument("--stacks-dir", type=Path, metavar="DIR", help="where stack files live (default stacks/)")
    preview.add_argument("--policy-config", type=Path, metavar="PATH",
                         help="policy pack config (default policies/config/<stack>.json)")
    preview.add_argument("--program", type=Path, metavar="FILE",
                         help="run this file's program(config) instead of the platform (for fixture programs)")
    preview.add_argument("--quiet", action="store_true", help="print only the verdict")
    preview.add_argument("--against", type=Path, metavar="BASE",
                         help="compare with the base's preview: its JSON report (--stack), or the folder `--out` "
                              "wrote for it (--env, or --stack: <BASE>/<stack>.json); prints what changes instead "
                              "of the plan")
    preview.add_argument("--diff-markdown", type=Path, metavar="PATH",
                         help="with --against: write the diff as Markdown (a pull request comment) here; with "
                              "--out it goes to DIR/<stack>.diff.md")
    preview.add_argument("--diff-json", type=Path, metavar="PATH",
                         help="with --against: write the diff as JSON (every change) here; with --out it goes to "
                              "DIR/<stack>.diff.json")
    preview.add_argument("--detailed-exitcode", action="store_true",
                         help="with --against: exit 0 when nothing changes, 4 when something does (1 still means "
                              "a mandatory violation, 2 bad input)")
    preview.add_argument("--require-approval", choices=("never", "broadening"), default="never",
                         help="with --against: `broadening` exits 5 when the change broadens access (a grant, "
                              "rule or binding added or widened, a Deny removed), so CI can ask for a security "
                              "review (1 still means a mandatory violation, 2 bad input)")
    diagram = sub.add_parser("diagram", help="write the architecture picture (Mermaid) from a stack's component tree")
    diagram.add_argument("--stack", default="prod", help="stack to draw (default prod)")
    diagram.add_argument("--output", type=Path, metavar="PATH", help="write here instead of stdout")
    charts = sub.add_parser("charts", help="the chart cache the offline renderer reads: where each pinned chart is, "
                                           "or fill it from the charts' own repositories")
    charts.add_argument("action", choices=["list", "pull"],
                        help="list: where each pinned chart is found; pull: fetch the missing ones (needs network)")
    charts.add_argument("--to", type=Path, metavar="DIR", help="pull into this folder (default ~/.cache/mlplat/charts)")
    mirror = sub.add_parser(
        "mirror", help="copy every third-party image and chart of an environment, by digest, into its in-region "
                       "registry (run after the cloud layer, before the cluster layer)")
    mirror.add_argument("--stack", required=True, help="the environment: a cloud-layer stack (prod) or its cluster "
                                                        "layer (prod-cluster)")
    mirror.add_argument("--registry", required=True, metavar="HOST",
                        help="the in-region registry: <account>.dkr.ecr.<region>.amazonaws.com (the cloud layer's "
                             "clusterDescriptor.registryHost)")
    mirror.add_argument("--dry-run", action="store_true", help="list what would be copied and its size; copy nothing")
    mirror.add_argument("--plain-http", action="append", default=[], metavar="HOST",
                        help="speak plain HTTP to this registry (a local test registry; repeatable)")
    bootstrap = sub.add_parser(
        "bootstrap", help="create what an account needs before its first `pulumi up`: the state bucket, the state "
                          "and secrets keys, the deployer and break-glass roles (idempotent; docs/bring-up.md)")
    bootstrap.add_argument("--account", required=True, help="the AWS account id (12 digits) the credentials are of")
    bootstrap.add_argument("--region", required=True, help="the region the environments deploy to (me-central-1)")
    bootstrap.add_argument("--environment", action="append", default=[], metavar="ENV",
                           help="an environment this account deploys (a cloud-layer stack: prod); repeatable")
    bootstrap.add_argument("--repository", metavar="OWNER/NAME",
                           help="the GitHub repository whose deploy workflow assumes the deployer role (default: "
                                "the stack files' deployRunner.repository)")
    bootstrap.add_argument("--stacks-dir", type=Path, metavar="DIR", help="where stack files live (default stacks/)")
    deploy = sub.add_parser(
        "deploy", help="run the real engine on a stack as the deploy workflow does: the pack's environment, the "
                       "stack created on first deploy with its secrets provider, then pulumi up (or --preview)")
    deploy.add_argument("--stack", required=True, help="the stack: prod (cloud layer) or prod-cluster")
    deploy.add_argument("--preview", action="store_true", help="pulumi preview instead of up; creates no stack")
    deploy.add_argument("--config", action="append", default=[], metavar="NS:KEY=VALUE",
                        help="config for this run (pulumi up --config), e.g. mlplat:platformImages=<json>")
    deploy.add_argument("--stacks-dir", type=Path, metavar="DIR", help="where stack files live (default stacks/)")
    pin = sub.add_parser(
        "pin", help="read the digest each unpinned image and chart names upstream and write it into "
                    "infra/versions.py (and out of the policy configs' awaiting lists); refuses a moved tag")
    pin.add_argument("--dry-run", action="store_true", help="list what would be pinned; write nothing")
    pin.add_argument("--only", action="append", default=[], metavar="NAME", help="only this image or chart")
    pin.add_argument("--update", action="append", default=[], metavar="NAME",
                     help="take the new digest of a pinned tag that moved upstream (after reviewing it)")
    pin.add_argument("--region", default="me-central-1", help="the region whose EKS registry EKS images come from")
    pin.add_argument("--plain-http", action="append", default=[], metavar="HOST",
                     help="speak plain HTTP to this registry (a local test registry; repeatable)")
    pin.add_argument("--versions", type=Path, metavar="PATH", help="the plan file (default infra/versions.py)")
    pin.add_argument("--policy-configs", type=Path, metavar="DIR", help="default policies/config")
    job = sub.add_parser(
        "job", help="a tenant's own training job: render the platform's JobSet for it, or submit it (no stack change; "
                    "infra/jobs.py)")
    job.add_argument("action", choices=["render", "submit"],
                     help="render: print the job's objects as YAML; submit: create them in the tenant's namespace")
    job.add_argument("--tenant", required=True, help="the tenant, and its namespace")
    job.add_argument("--name", required=True, help="the job's name (the JobSet's; unique in the namespace)")
    job.add_argument("--job", required=True, metavar="FILE",
                     help="the job: a YAML mapping of mlplat:training keys (model, nodes, maxSteps, pool, ...)")
    job.add_argument("--from", dest="source", metavar="FILE",
                     help="render from this saved training-jobs ConfigMap instead of the cluster's")
    job.add_argument("--context", help="the kubeconfig context (default: the current one)")
    docs = sub.add_parser("docs", help="regenerate the README's component reference from the code and the previews")
    docs.add_argument("--readme", type=Path, default=Path("README.md"), help="the README to update (default README.md)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands = {"bootstrap": _bootstrap, "charts": _charts, "deploy": _deploy, "diagram": _diagram, "docs": _docs,
                "job": _job, "mirror": _mirror, "pin": _pin, "preview": _preview}
    code = commands[args.command](args)
    if argv is None:
        # Run as the command: tearing the interpreter down (pulumi_aws's thousands of classes,
        # the preview's objects) takes most of a second after the work is done, and nothing
        # is left to it: every file is written and closed, the policy pack is stopped.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _job(args: argparse.Namespace) -> int:
    import yaml

    from infra.jobs import JobError, load_data, read_config_map, read_job, render, submit

    try:
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,28}[a-z0-9])?", args.name):
            raise JobError(f"--name {args.name!r}: 1 to 30 lowercase letters, digits and '-', starting with a letter")
        job = read_job(args.job)
        data = load_data(args.source) if args.source else read_config_map(args.tenant, args.context)
        objects = render(data, args.tenant, args.name, job, where=args.job)
        if args.action == "render":
            print(yaml.safe_dump_all(objects, sort_keys=False), end="")
            return EXIT_OK
        name = submit(objects, args.tenant, args.context)
    except JobError as err:
        print(f"mlplat job: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"jobset {args.tenant}/{name} submitted; its queue admits it when the tenant's quota allows "
          f"(kubectl get jobset,workloads -n {args.tenant})")
    return EXIT_OK


def _charts(args: argparse.Namespace) -> int:
    from infra.chart_cache import ChartCacheError, cache_dirs, locate, pull
    from infra.versions import CHARTS

    try:
        if args.action == "pull":
            results = pull([(c.name, c.repository, c.version) for c in CHARTS.values()], args.to,
                           progress=lambda line: print(line, file=sys.stderr, flush=True))
            fetched = sum(r.pulled for r in results)
            print(f"{fetched} chart(s) pulled, {len(results) - fetched} already cached")
            return EXIT_OK
        missing = 0
        for chart in CHARTS.values():
            try:
                print(f"{chart.name} {chart.version}: {locate(chart.name, chart.version)}")
            except ChartCacheError:
                missing += 1
                print(f"{chart.name} {chart.version}: missing")
        if missing:
            print(f"mlplat: error: {missing} pinned chart(s) missing from the chart cache "
                  f"({', '.join(map(str, cache_dirs()))}); run `mlplat charts pull` where the chart repositories "
                  "are reachable", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK
    except ChartCacheError as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _mirror(args: argparse.Namespace) -> int:
    from infra.catalog import lookup
    from infra.config import CLUSTER_SUFFIX, ConfigError
    from infra.descriptor import environment_settings
    from infra.mirror import Mirror, MirrorError, check_registry, plan, summary_text
    from infra.skopeo import RegistryError, Skopeo, Unreachable, auth_file, host_of
    from infra.versions import PlanError

    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    environment = args.stack.removesuffix(CLUSTER_SUFFIX)
    try:
        config = environment_settings(args.stack, args.registry)  # a customer's: its descriptor's
        check_registry(args.registry, config.region)
        artifacts = plan(environment, config.region, args.registry,
                         {lookup(pool.instance_type).platform for pool in config.node_pools})
    except (ConfigError, PlanError) as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    progress(f"{environment}: {len(artifacts)} artifact(s) of the plan; asking {args.registry} what it holds")
    # A cancelled CI job: stop as on Ctrl-C. The caller's handler comes back afterwards, so
    # a process that runs the command in-process is not left raising on its own SIGTERM.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        # Sources in ECR (the region's EKS add-on registry) take ECR's login, which the
        # deployer's AWS credentials give: no `skopeo login` step of its own.
        with auth_file(ecr_sources={host_of(a.source) for a in artifacts if a.kind == "image"}) as authfile:
            mirror = Mirror(Skopeo(authfile, frozenset(args.plain_http)), progress)
            summary = mirror.run(artifacts, dry_run=args.dry_run)
    except Unreachable as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (MirrorError, RegistryError) as err:
        print(f"mlplat: mirror failed: {err}", file=sys.stderr)
        return EXIT_VIOLATIONS
    except KeyboardInterrupt:
        print("mlplat: mirror interrupted; run it again to resume (artifacts in place are skipped, and blobs "
              "already sent are not sent again)", file=sys.stderr)
        return 130
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGTERM, previous)
    print(summary_text(summary, args.registry, args.dry_run))
    return EXIT_OK


def _bootstrap(args: argparse.Namespace) -> int:
    import boto3

    from infra.bootstrap import BootstrapError, make_plan, run
    from infra.config import STACKS_DIR, load_stack

    stacks_dir = args.stacks_dir or STACKS_DIR
    try:
        plan = make_plan(args.account, args.region, args.environment, args.repository,
                         lambda env: load_stack(env, stacks_dir))
        print(f"bootstrap: account {plan.account}, {plan.region}, for {', '.join(plan.environments)} "
              f"deployed from {plan.repository}", flush=True)
        created = run(plan, boto3.Session(), lambda line: print(line, flush=True))
    except BootstrapError as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{len(created)} created, the rest already there. For the stacks and the deploy workflow:\n"
          f"  state backend (vars.PULUMI_BACKEND_URL):   {plan.backend_url}\n"
          f"  secrets provider (each stack file):       {plan.secrets_provider}\n"
          f"  deployer role (vars.AWS_DEPLOY_ROLE_ARN): {plan.role_arn(plan.deployer_role)}\n"
          f"  break-glass role:                         {plan.role_arn(plan.break_glass_role)}\n"
          f"  preview role (vars.AWS_PREVIEW_ROLE_ARN): {plan.role_arn(plan.preview_role)}\n"
          "The deployer trusts the OIDC subject customised to repo, context and job_workflow_ref: set it once "
          "(docs/bring-up.md, step 2).")
    return EXIT_OK


def _deploy(args: argparse.Namespace) -> int:
    from infra.deploy import DeployError, deploy

    root = Path.cwd()
    try:
        return deploy(args.stack, preview=args.preview, config=args.config, root=root,
                      stacks_dir=args.stacks_dir or root / "stacks", say=lambda line: print(line, flush=True))
    except DeployError as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _pin(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from infra.config import REPO_ROOT
    from infra.pins import PinError, drop_awaiting, hosts, read_plan, report, resolve, select, write_plan
    from infra.skopeo import Skopeo, Unreachable, auth_file

    versions = args.versions or REPO_ROOT / "infra" / "versions.py"
    configs = args.policy_configs or REPO_ROOT / "policies" / "config"
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        entries = select(read_plan(versions, args.region), args.only, args.update)
    except PinError as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with ExitStack() as stack:
        try:
            authfile = stack.enter_context(auth_file(ecr_sources=hosts(entries)))
        except Unreachable as err:
            # The scheduled run has no AWS credentials: the ECR sources (EKS's registry) are
            # then read without a login and come back as not read; the rest are pinned.
            say(f"{err}; reading the others without it")
            authfile = stack.enter_context(auth_file())
        outcome = resolve(entries, Skopeo(authfile, frozenset(args.plain_http)), args.update, progress=say)
    print("\n".join(report(outcome, entries, args.dry_run)))
    if outcome.changes and not args.dry_run:
        write_plan(versions, entries, outcome.changes)
        drop_awaiting(configs, [e.name for e in entries if e.kind == "image" and e.key in outcome.pinned])
    return EXIT_VIOLATIONS if outcome.moved else EXIT_OK


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _docs(args: argparse.Namespace) -> int:
    from infra.config import available_stacks
    from infra.preview.component_docs import update_readme
    from infra.preview.engine import run_preview
    from workloads.inputs import check_output, read_text

    try:
        text = read_text(args.readme, "README", 4 << 20)
        check_output(args.readme, "README")
        updated = update_readme(text, [run_preview(stack) for stack in available_stacks()])
    except (OSError, ValueError) as err:  # InputError is a ValueError
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.readme.write_text(updated)
    return EXIT_OK


def _diagram(args: argparse.Namespace) -> int:
    from infra.config import ConfigError
    from infra.preview.diagram import architecture_markdown
    from infra.preview.engine import run_preview

    bad = _unwritable([(args.output, "diagram", False)])
    if bad:
        print(f"mlplat: error: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        result = run_preview(args.stack)
    except ConfigError as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = architecture_markdown(result)
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")
    return EXIT_OK


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _terminal(text: str) -> str:
    """Text for a terminal or a CI log: names from a base report or a pull request's program
    may hold escape sequences (colours, cursor moves, a hidden line), shown escaped instead."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _unwritable(outputs: list[tuple[Path | None, str, bool]]) -> str | None:
    """The first of (path, what, is a folder) that cannot be written, as one line."""
    from workloads.inputs import InputError, check_output

    for path, what, folder in outputs:
        if path is not None:
            try:
                check_output(path, what, folder=folder)
            except InputError as err:
                return str(err)
    return None


def _preview(args: argparse.Namespace) -> int:
    # Imported here so `mlplat --help` and argument errors answer at once.
    from infra.config import ConfigError, load_layer
    from infra.preview.analyzer import PackError
    from infra.preview.engine import environment_stacks, load_program, run_environment, run_preview
    from infra.preview.fixtures import UnansweredInvoke
    from infra.preview.report import (manifests_problem, plan_text, verdict_text, write_json, write_manifests,
                                      write_markdown)

    started = time.perf_counter()

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    if args.env and (args.json or args.markdown or args.manifests or args.program or args.stacks_dir
                     or args.policy_config or args.diff_markdown or args.diff_json):
        print("mlplat: error: --env previews the environment's two stacks from stacks/; use --out DIR for their "
              "reports, or --stack NAME for one stack's options", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.against and (args.diff_markdown or args.diff_json or args.detailed_exitcode
                             or args.require_approval != "never"):
        print("mlplat: error: --diff-markdown, --diff-json, --detailed-exitcode and --require-approval compare with a "
              "base: add "
              "--against BASE.json (the base commit's `mlplat preview --json` report)", file=sys.stderr)
        return EXIT_BAD_INPUT
    # Where the reports go is checked before anything runs: a directory named as a file, a
    # file named as a folder or a path that cannot be written is one line, not a traceback
    # after the whole preview.
    bad = _unwritable([(args.json, "JSON report", False), (args.markdown, "Markdown report", False),
                       (args.diff_markdown, "diff Markdown", False), (args.diff_json, "diff JSON", False),
                       (args.manifests, "Kubernetes manifests", True), (args.out, "reports (--out)", True)])
    if not bad:
        folders = [args.manifests] if args.manifests else []
        if args.out:
            folders += [args.out / f"{stack}-manifests"
                        for stack in (environment_stacks(args.env) if args.env else [args.stack])]
        bad = next(filter(None, map(manifests_problem, folders)), None)
    if bad:
        print(f"mlplat: error: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.policy_config:  # a misspelt path is refused here, never taken as an empty config
        from infra.preview.analyzer import load_policy_config

        try:
            load_policy_config(args.policy_config)
        except ConfigError as err:
            print(f"mlplat: error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    # The base is read and checked before anything runs or is written.
    bases: dict[str, dict] = {}
    if args.against:
        from infra.preview.diff import BaseReportError, read_base_report

        stacks = environment_stacks(args.env) if args.env else [args.stack]
        if args.env and not args.against.is_dir():
            print(f"mlplat: error: --against {args.against}: with --env, name the folder that `mlplat preview --env "
                  f"{args.env} --out DIR` wrote on the base commit (it holds "
                  f"{' and '.join(f'{s}.json' for s in stacks)})", file=sys.stderr)
            return EXIT_BAD_INPUT
        try:
            bases = {stack: read_base_report(args.against, stack) for stack in stacks}
        except BaseReportError as err:
            print(f"mlplat: error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        if args.env:
            results = run_environment(args.env, progress=progress)
        else:
            program = load_program(args.program) if args.program else None
            config = load_layer(args.stack, args.stacks_dir) if args.stacks_dir else None
            results = [run_preview(args.stack, program=program, config=config, policy_config=args.policy_config,
                                   progress=progress)]
    except ConfigError as err:
        print(f"mlplat: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (PackError, UnansweredInvoke) as err:
        print(f"mlplat: preview failed: {err}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as err:  # the program raised: show its one line, as `pulumi up` would
        cause = _user_error(err)
        if cause is not None:
            print(f"mlplat: error: {cause}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise

    changed = broadening = False
    for result in results:
        out = args.out
        json_path = out / f"{result.stack}.json" if out else args.json
        markdown_path = out / f"{result.stack}.md" if out else args.markdown
        manifests = out / f"{result.stack}-manifests" if out else args.manifests
        if json_path:
            write_json(result, json_path)
        if markdown_path:
            write_markdown(result, markdown_path)
        if manifests:
            count = write_manifests(result, manifests)
            progress(f"wrote {count} Kubernetes objects of {result.stack} to {manifests}")
        if len(results) > 1:
            print(f"== {result.stack} ==")
        if bases:
            diff = _compare(result, bases[result.stack], args)
            changed, broadening = changed or diff.changed, broadening or diff.security.broadening
        else:
            print(_terminal(verdict_text(result) if args.quiet else plan_text(result)))
        progress(f"{result.stack} done in {result.seconds:.1f}s")
    code = max(result.exit_code for result in results)
    if code != EXIT_OK:
        return code
    if args.require_approval == "broadening" and broadening:
        return EXIT_BROADENING
    return EXIT_CHANGES if args.detailed_exitcode and changed else code


def _compare(result, base: dict, args: argparse.Namespace):
    """Print (and write) what changes from the base's report to this preview's; the diff."""
    import json

    from infra.preview.diff import as_read, diff_json, diff_markdown, diff_reports, diff_text
    from infra.preview.report import verdict_text

    diff = diff_reports(base, as_read(result.report))  # the head as its JSON report reads, as the base does
    print(_terminal(diff.summary() if args.quiet else diff_text(diff)))
    print(_terminal(verdict_text(result).splitlines()[0] if args.quiet else verdict_text(result)))
    markdown = args.out / f"{result.stack}.diff.md" if args.out else args.diff_markdown
    data = args.out / f"{result.stack}.diff.json" if args.out else args.diff_json
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(diff_markdown(diff) + "\n")
    if data:
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text(json.dumps(diff_json(diff), separators=(",", ":")) + "\n")
    return diff


def _user_error(err: BaseException) -> str | None:
    """A config error or `pulumi.RunError` raised inside the program, however wrapped."""
    import pulumi

    from infra.config import ConfigError

    seen: BaseException | None = err
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:  # chains can loop back on themselves
        visited.add(id(seen))
        if isinstance(seen, (ConfigError, pulumi.RunError)):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
