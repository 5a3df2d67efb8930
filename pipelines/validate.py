"""Checks a sampling job's inputs without sampling: schema, spec, tables, a few rows each.

  python -m pipelines.validate --graph_schema G --sampling_spec S [--input_seeds T]
      [--edge_aggregation_method edge|node] [--rows 5] [--max_files 8]

Checks, each reported as PASS or FAIL with one line of detail:
  * the GraphSchema (node and edge sets, features, table names) and that records can
    be written for it;
  * the SamplingSpec against the schema (ops, edge sets, sample sizes, weights);
  * every table: its files exist and are not all empty, the format is known, and the
    header (CSV) or columns (Parquet, tf.Example) hold every id column and feature of
    the schema, and the first --rows rows of up to --max_files files parse (a set in
    BigQuery: its table or query is read through a read session, --max_files streams);
  * the seed table (--input_seeds): same checks for its #id column (link seeds: #source,
    #target), and a temporal spec's seed_time column when it has one.
Only the first rows of each file are read, so it takes seconds even on gs://.

Exit code: 0 when every check passes, 1 when one fails, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import time

from pipelines import cli
from pipelines.toolkit import add_graph_flags, run_tool
from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import graph_tables, readers
from sampler.sample import temporal
from sampler.sample.encode import encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.validate",
        description=__doc__,
        epilog=cli.guide("validate"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_graph_flags(parser, seeds_help="Optional seed table (#id column).")
    parser.add_argument("--rows", type=int, default=5, help="Rows parsed per file (default 5).")
    parser.add_argument(
        "--max_files", type=int, default=8, help="Files per table whose rows are parsed."
    )
    args = parser.parse_args(argv)
    if args.rows < 1 or args.max_files < 1:
        parser.error("--rows and --max_files must be at least 1")
    return args


class Report:
    """Collects PASS/FAIL lines and prints them as they come."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name: str, fn) -> object:
        """Runs fn() -> detail; a UserError is a failed check. Returns fn's value or None."""
        try:
            detail, value = fn()
        except UserError as e:
            self.failed += 1
            print(f"  FAIL {name:28s} {str(e).splitlines()[0]}", flush=True)
            return None
        self.passed += 1
        print(f"  PASS {name:28s} {detail}", flush=True)
        return value


def first_rows(path: str, fmt: str, id_columns, specs, rows: int) -> int:
    """Parses the first `rows` rows of one file; returns how many there were."""
    tables = readers.read_table(path, fmt, tuple(id_columns), specs, batch_rows=rows)
    try:
        table = next(tables, None)
    finally:
        tables.close()
    return 0 if table is None else table.num_rows


def check_table(pattern: str, id_columns, specs, rows: int, max_files: int, where: str = ""):
    """Parses the first `rows` rows of up to `max_files` files (a set in BigQuery: streams of
    a read session; `where` names the set)."""
    units = graph_tables.table_files(pattern, (*id_columns, *sorted(specs)), where)
    paths = [path for path, _ in units]
    fmt = units[0][1] if units else "bigquery"
    parsed = 0
    for path, unit_fmt in units[:max_files]:
        parsed += first_rows(path, unit_fmt, id_columns, specs, rows)
    unit = "stream" if fmt == "bigquery" else "file"
    if parsed == 0:
        what = graph_tables.display(pattern) if unit == "stream" else f"table files '{pattern}'"
        raise UserError(f"{what}: no rows in the first {max_files} {unit}s")
    columns = ", ".join([*id_columns, *sorted(specs)])
    checked = f"{min(len(paths), max_files)} of {len(paths)}" if len(paths) > max_files else ""
    files_text = f"{len(paths)} {unit}{'s' if len(paths) > 1 else ''}"
    if checked:
        files_text += f" ({checked} read)"
    return f"{fmt}, {files_text}, {parsed} rows parsed ({columns})", None


def _seed_time(plan, pattern: str) -> dict:
    """The seeds table's time column, checked as `sample` reads it: a temporal spec's, when
    the table has one (sampler.io.graph_tables.has_seed_times)."""
    kind = None if plan is None else temporal.table_time_kind(plan)
    if kind is None or not graph_tables.has_seed_times(graph_tables.table_files(pattern)):
        return {}
    return {graph_tables.SEED_TIME_COLUMN: FeatureSpec(graph_tables.SEED_TIME_COLUMN, kind, ())}


def _fail(message: str):
    raise UserError(message)


def main_body(argv) -> int:
    args = parse_args(argv)
    start = time.time()
    report = Report()
    print(f"validate: {args.graph_schema} with {args.sampling_spec}")

    def schema_check():
        graph = load_graph(args.graph_schema)
        encode_specs(graph.schema)
        latent = [n for n, info in graph.node_sets.items() if not info.filename]
        extra = f" ({len(latent)} latent: {', '.join(latent)})" if latent else ""
        detail = (
            f"{graph.schema_path}: {len(graph.node_sets)} node sets{extra},"
            f" {len(graph.edge_sets)} edge sets"
        )
        return detail, graph

    graph = report.check("schema", schema_check)
    if graph is not None:

        def spec_check():
            plan = make_plan(
                graph,
                load_sampling_spec(args.sampling_spec),
                args.edge_aggregation_method,
                args.seed_edge_set,
            )
            strategies = sorted({op.strategy for op in plan.ops})
            seeds = f"'{plan.seed_set}'"
            if plan.link is not None:
                link = plan.link
                seeds = f"the edges of '{link.edge_set}' ({link.source} -> {link.target})"
            detail = (
                f"seed op '{plan.seed_op}' on {seeds}, {len(plan.ops)} ops"
                f" ({', '.join(strategies) or 'none'}), {plan.aggregation} aggregation"
            )
            return detail, plan

        plan = report.check("sampling spec", spec_check)
        seen = {}
        for name, info in graph.node_sets.items():
            if info.filename:
                report.check(
                    f"node set {name}",
                    lambda info=info: check_table(
                        info.filename,
                        ("#id",),
                        info.features,
                        args.rows,
                        args.max_files,
                        f"node set '{info.name}'",
                    ),
                )
        for name, info in graph.edge_sets.items():
            label = f"edge set {name}"
            if info.filename in seen and not info.features:
                twin = seen[info.filename]
                print(f"  PASS {label:28s} same table as edge set {twin}, read backwards")
                report.passed += 1
                continue
            seen.setdefault(info.filename, name)
            report.check(
                label,
                lambda info=info: check_table(
                    info.filename,
                    ("#source", "#target"),
                    info.features,
                    args.rows,
                    args.max_files,
                    f"edge set '{info.name}'",
                ),
            )
    else:
        plan = report.check("sampling spec", lambda: _fail("not checked: the schema failed"))
    if args.input_seeds:
        columns = ("#source", "#target") if args.seed_edge_set else ("#id",)
        report.check(
            "input seeds",
            lambda: check_table(
                args.input_seeds,
                columns,
                _seed_time(plan, args.input_seeds),
                args.rows,
                args.max_files,
            ),
        )
    seconds = time.time() - start
    total = report.passed + report.failed
    if report.failed:
        print(f"FAIL: {report.failed} of {total} checks failed ({seconds:.1f} s)")
        return 1
    print(f"PASS: {total} checks passed ({seconds:.1f} s)")
    return 0


def main(argv=None) -> int:
    return run_tool(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
