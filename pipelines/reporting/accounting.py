"""What every run accounts for: its output files, its dead letters and `run_summary.json`.

* `check_output`: the files a run writes, checked before the pipeline starts. An output that
  would replace or re-read an input (pipelines.outputs.input_checks), a folder another run holds
  (pipelines.outputs.output_lock), or existing output without `--overwrite`, is a one-line UserError.
  With `--overwrite` the old files of the run's patterns are deleted first, so old and new
  shards never mix. Every folder a run writes is derived from its patterns.
* `write_bad_records`: the dead-letter output, `<output dir>/bad_records-SSSSS-of-NNNNN.jsonl`,
  one JSON line per bad input row (only written when there is one).
* `write_rejected_seeds`: `<output dir>/rejected_seeds-00000-of-00001.jsonl`, one JSON line
  per seed that got no subgraph because it is not in the seed node set (sample only).
* `check_bad_records`: after the run, more than `--max_bad_records` bad rows in total is a
  one-line UserError quoting the first few.
* `write_run_summary`: `<output dir>/run_summary.json`, written last. Its presence marks a
  complete run (as does `schema.pbtxt` for samples): a failed run never writes it.
"""

from __future__ import annotations

import heapq
import json
import os
import platform
import re
import sys
import time

from pipelines.outputs import input_checks, output_lock
from sampler.errors import UserError
from sampler.io import bigquery_source, gcs, no_follow
from sampler.io import files as io_files
from sampler.io.files import has_scheme

# apache_beam is imported where a Beam transform is built (write_bad_records, ...) only: a run
# without Beam (pipelines.partition --runner InMemory) on local files never loads it.

SUMMARY_NAME = "run_summary.json"
BAD_RECORDS_PREFIX = "bad_records"
BAD_RECORDS_GLOB = f"{BAD_RECORDS_PREFIX}-*.jsonl"
REJECTED_SEEDS_PREFIX = "rejected_seeds"
REJECTED_SEEDS_FILE = rf"{REJECTED_SEEDS_PREFIX}-\d{{5}}-of-\d{{5}}\.jsonl"  # a pattern
MANIFEST_NAME = ".beam_graph_manifest.json"
# Paths (relative to the output folder, full match) that every run may write: the summary, the
# dead letters, the manifest, and the temporary folders of Beam's text sink.
COMMON_OUTPUTS = (
    re.escape(SUMMARY_NAME),
    rf"{BAD_RECORDS_PREFIX}-\d{{5}}-of-\d{{5}}\.jsonl",
    re.escape(MANIFEST_NAME),
    r"beam-temp-bad_records-[0-9a-f]+/.*",
    io_files.PARTIAL_PATTERN,  # a file being written (sampler.io.files.write_output)
)


def _join(folder: str, name: str) -> str:
    return io_files.join(folder, name) if folder else name


def _match(pattern: str) -> list[str]:
    try:
        found = io_files.match(pattern)
    except Exception:  # noqa: BLE001 - Beam raises BeamIOError and friends when nothing matches
        return []
    return sorted(found)


def input_patterns(graph, *extra_inputs: str | None) -> list[str]:
    """The input names as given: the table file names (globs, `base@N`) and `extra_inputs`
    (the spec, the seeds); the schema is an input file (input_files)."""
    patterns = [info.filename for info in graph.node_sets.values() if info.filename]
    patterns += [info.filename for info in graph.edge_sets.values()]
    patterns = [p for p in patterns if not bigquery_source.is_source(p)]  # no file to keep safe
    return patterns + [p for p in extra_inputs if p]


def input_files(graph, *extra_inputs: str | None) -> list[str]:
    """Every input file of a run: the schema, the table files (their patterns expanded) and
    `extra_inputs` (the spec, the seeds; patterns expanded). A pattern that matches nothing adds
    nothing (the readers report it)."""
    found = {graph.schema_path}
    for pattern in input_patterns(graph, *extra_inputs):
        shards = re.fullmatch(r"(?P<base>.+)@(?P<count>\d+)", pattern)
        found.update(_match(shards.group("base") + "-*" if shards else pattern) or [pattern])
    return sorted(input_checks.canonical(p) for p in found if p)


def check_output(
    output_dir: str,
    owned: list[str],
    inputs: list[str],
    overwrite: bool,
    flag: str,
    dedicated: bool = False,
    files: list[str] = (),
    examples: list[str] = (),
) -> None:
    """Before the pipeline starts: the output replaces and re-reads no input, no other run
    holds the folder (this run takes it: pipelines.outputs.output_lock), no old run is there.

    `owned` are regular expressions (full match, relative to `output_dir`) of the files the run
    writes, `examples` one name of each kind, `inputs` the input patterns (input_patterns),
    `files` the input files (input_files). pipelines.outputs.input_checks refuses what would replace
    or re-read an input, and nothing else. With `dedicated` (a folder only this run writes,
    e.g. a partition folder), any content counts as existing output. With `overwrite` only
    files this project wrote are deleted: those the manifest of the earlier run lists or its
    patterns match, and those this run's `owned` patterns match; never an input file.
    """
    gcs.check_object_name(output_dir, flag)  # before anything is read or written there
    marker = re.escape(output_lock.MARKER_NAME)  # no link, FIFO or folder there, first:
    input_checks.check_links(output_dir, [*owned, *COMMON_OUTPUTS, marker], flag)
    manifest = _manifest(output_dir)
    patterns = [*owned, *COMMON_OUTPUTS, *manifest.get("patterns", [])]
    input_checks.check_replaced(output_dir, patterns, set(manifest.get("files", [])), files, flag)
    input_checks.check_owned_folders(output_dir, patterns, list(files), flag)
    input_checks.check_re_read(output_dir, list(examples), list(inputs), flag)
    input_checks.check_links(output_dir, [*patterns, marker], flag)
    output_lock.hold(output_dir, flag)  # from here on the folder is this run's
    old = owned_files(output_dir, owned, list(files))
    # A manifest alone (left by a refused, failed or interrupted run whose partial output was
    # removed) is no output: the next run may go ahead without --overwrite.
    existing = [p for p in old if p.rsplit("/", 1)[-1] != MANIFEST_NAME]
    if dedicated and not existing and not has_scheme(output_dir) and os.path.isdir(output_dir):
        skip = {MANIFEST_NAME, output_lock.MARKER_NAME}
        existing = sorted(n for n in os.listdir(output_dir) if n not in skip)
    if not existing:
        return
    if not overwrite:
        raise UserError(
            f"{flag} {output_dir}: the output exists already ({existing[0]}, "
            f"{len(existing)} files); pass --overwrite to replace it"
        )
    if old:
        io_files.delete(old)
    _remove_empty_folders(output_dir, patterns)


def _listing(output_dir: str, patterns: list[str]) -> list[str]:
    """The files directly in `output_dir` and anywhere under the folders that hold files of
    `patterns` (input_checks.owned_folders), relative to it."""
    folders = input_checks.owned_folders(patterns)
    if has_scheme(output_dir):
        base = output_dir.rstrip("/") + "/"
        listed = [p[len(base) :] for p in _match(base + "**") if p.startswith(base)]
        # As on disk: only the files directly in it and under its owned folders.
        return [r for r in listed if "/" not in r or folders.fullmatch(r.split("/")[0])]
    top = output_dir or "."
    if not os.path.isdir(top):
        return []
    out = []
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name)
        if not os.path.isdir(path):
            out.append(name)
        elif folders.fullmatch(name) and not os.path.islink(path):
            for folder, _, files in os.walk(path):
                rel = os.path.relpath(folder, top)
                out += [f"{rel}/{f}" for f in files]
    return sorted(out)


def _manifest(output_dir: str) -> dict:
    path = _join(output_dir, MANIFEST_NAME)
    try:
        if has_scheme(path):
            with io_files.open_stream(path) as f:
                data = json.loads(f.read().decode("utf-8"))
        else:  # never a read that waits on a FIFO
            data = json.loads(no_follow.read_regular(path).decode("utf-8"))
    except Exception:  # noqa: BLE001 - no manifest (or not ours): nothing listed
        return {}
    return data if isinstance(data, dict) else {}


def owned_files(output_dir: str, owned: list[str], inputs: list[str]) -> list[str]:
    """The files under `output_dir` this project wrote: listed in its manifest, matching the
    manifest's patterns or `owned` (+ COMMON_OUTPUTS), and not one of the `inputs` (files)."""
    manifest = _manifest(output_dir)
    patterns = [*owned, *COMMON_OUTPUTS, *manifest.get("patterns", [])]
    match = owned_matcher(patterns)
    listed = set(manifest.get("files", []))
    found = [
        _join(output_dir, rel)
        for rel in _listing(output_dir, patterns)
        if rel in listed or match.fullmatch(rel)
    ]
    kept = {input_checks.canonical(p) for p in inputs}
    return sorted(p for p in found if input_checks.canonical(p) not in kept)


def owned_matcher(owned: list[str]) -> re.Pattern:
    """One regular expression (full match) for the patterns `owned` and COMMON_OUTPUTS."""
    return input_checks.matcher([*owned, *COMMON_OUTPUTS])


def _remove_empty_folders(output_dir: str, patterns: list[str]) -> None:
    """Removes the empty folders of `patterns` in `output_dir` (e.g. part<i>/ of an earlier
    run, input_checks.owned_folders)."""
    top = output_dir or "."
    if has_scheme(output_dir) or not os.path.isdir(top):
        return
    folders = input_checks.owned_folders([*patterns, *COMMON_OUTPUTS])
    for name in os.listdir(top):
        path = os.path.join(top, name)
        if folders.fullmatch(name) and os.path.isdir(path) and not os.path.islink(path):
            for folder, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
                if not os.listdir(folder):
                    os.rmdir(folder)


def write_manifest(output_dir: str, owned: list[str], inputs: list[str]) -> None:
    """`<output_dir>/.beam_graph_manifest.json`: the patterns of the files this run writes, and
    (once the run is over) the files, never one of the input files `inputs`. Written before
    the run too, so that --overwrite after a killed run still knows them. A folder that cannot
    be written is a one-line UserError."""
    files = [
        p[len(output_dir) + 1 :] if output_dir else p
        for p in owned_files(output_dir, owned, inputs)
    ]
    data = {"patterns": list(owned), "files": [f for f in files if f != MANIFEST_NAME]}
    path = _join(output_dir, MANIFEST_NAME)
    try:
        if output_dir and not has_scheme(output_dir):
            os.makedirs(output_dir, exist_ok=True)
        with io_files.write_output(path) as f:  # a full disk: the manifest before the run stays
            f.write((json.dumps(data, indent=1) + "\n").encode())
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - OSError locally, BeamIOError remotely
        reason = (has_scheme(path) and gcs.failure_reason(e, path)) or unwritable_reason(e)
        raise UserError(f"cannot write the output {path}: {reason}") from e


def unwritable_reason(error: BaseException) -> str:
    return io_files.os_reason(error)  # the reason every writer gives (a full disk: ENOSPC)


def remove_leftovers(output_dir: str, patterns: list[str]) -> None:
    """After a failed run: removes the temporary folders (and files) matching `patterns`; only
    in a folder this process holds (pipelines.outputs.output_lock): never another run's files."""
    if not output_lock.holds(output_dir):
        return
    matcher = input_checks.matcher(patterns)
    try:
        stale = [
            _join(output_dir, r) for r in _listing(output_dir, patterns) if matcher.fullmatch(r)
        ]
        if stale:
            io_files.delete(stale)
        _remove_empty_folders(output_dir, patterns)
    except Exception:  # noqa: BLE001 - best effort: the run's own error is the one to report
        pass


def write_bad_records(bad_records, output_dir: str) -> None:
    """Writes the dead-letter JSON lines (if any) to `<output_dir>/bad_records-*.jsonl`."""
    import apache_beam as beam

    _ = bad_records | "WriteBadRecords" >> beam.io.WriteToText(
        _join(output_dir, BAD_RECORDS_PREFIX),
        file_name_suffix=".jsonl",
        num_shards=1,
        skip_if_empty=True,
    )


def write_rejected_seeds(rejected, output_dir: str) -> None:
    """Writes the rejected seeds' JSON lines (if any) to `<output_dir>/rejected_seeds-*.jsonl`."""
    if rejected is None:
        return
    import apache_beam as beam

    _ = rejected | "WriteRejectedSeeds" >> beam.io.WriteToText(
        _join(output_dir, REJECTED_SEEDS_PREFIX),
        file_name_suffix=".jsonl",
        num_shards=1,
        skip_if_empty=True,
    )


def write_rejected_seeds_file(lines: list[str], output_dir: str) -> None:
    """The same file without Beam (--runner InMemory); nothing when there are no lines."""
    _write_lines(lines, output_dir, REJECTED_SEEDS_PREFIX)


def write_bad_records_file(lines: list[str], output_dir: str) -> None:
    """write_bad_records' file without Beam (--runner InMemory); nothing when there are no
    lines (Beam's text sink writes them in no particular order; these are in reading order)."""
    _write_lines(lines, output_dir, BAD_RECORDS_PREFIX)


def _write_lines(lines: list[str], output_dir: str, prefix: str) -> None:
    if not lines:
        return
    path = io_files.shard_name(_join(output_dir, prefix), 0, 1) + ".jsonl"
    with io_files.create_file(path) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))


def first_bad_records(output_dir: str, count: int = 3) -> list[str]:
    """'file: row N (line L): reason' of the first `count` dead letters written to
    `output_dir`, by input file and row: the same lines whatever order the runner wrote them
    in (Beam's text sink keeps none), holding `count` of them at a time."""

    def letters():
        for path in _match(_join(output_dir, BAD_RECORDS_GLOB)):
            with io_files.open_stream(path) as f:
                for raw in f.read().decode("utf-8").splitlines():
                    yield raw, json.loads(raw)

    def order(letter):
        raw, bad = letter
        row = bad.get("row")
        return str(bad.get("file")), row if isinstance(row, int) else -1, raw

    out = []
    for _, bad in heapq.nsmallest(count, letters(), key=order):
        line = f" (line {bad['line']})" if bad.get("line") is not None else ""
        out.append(f"{bad['file']}: {bad['unit']} {bad['row']}{line}: {bad['reason']}")
    return out


def bad_record_total(counters: dict[str, int]) -> int:
    return sum(v for k, v in counters.items() if k.startswith("bad_records/"))


def check_bad_records(counters: dict[str, int], limit: int, output_dir: str) -> None:
    """UserError when the run saw more than `limit` bad input rows in total."""
    from sampler.io.readers import too_many_bad_records

    total = bad_record_total(counters)
    if total > limit:
        where = _join(output_dir, BAD_RECORDS_GLOB)
        raise too_many_bad_records(total, limit, first_bad_records(output_dir), where)


def check_shuffle(counters: dict[str, int]) -> None:
    """UserError when rows sent to the per-sample buckets did not all arrive there.

    Seen with Beam 2.77's local runner with SDK worker processes at scale (the sharded and
    topology placements lost grouped rows, dropped by its time-flushed data streams;
    pipelines.beam_patches.streamed_inputs): better a failed run than wrong subgraphs.
    """
    lost = []
    for name, sent in sorted(counters.items()):
        if name.startswith("shuffle_rows_sent/"):
            kind = name.split("/", 1)[1]
            received = counters.get(f"shuffle_rows_received/{kind}", 0)
            if received != sent:
                lost.append(f"{kind} {sent - received:,} of {sent:,}")
    if lost:
        raise UserError(
            "the runner lost rows between the sampling stages and their buckets ("
            + ", ".join(lost)
            + "); nothing written is complete. Beam 2.77's local runner did so with worker"
            " processes or threads before pipelines.beam_patches.streamed_inputs: run in one process (the"
            " default --direct_running_mode) or on Dataflow, or use --graph_placement worker"
        )


def summary(argv, args, counters: dict[str, int], seconds: float, **sections) -> dict:
    """The common part of run_summary.json; `sections` are added as they are."""
    return {
        "command": [os.path.basename(sys.argv[0]) or "python", *argv],
        "flags": {k: v for k, v in sorted(vars(args).items())},
        "wall_seconds": round(seconds, 3),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "bad_records": bad_record_total(counters),
        **sections,
        "counters": dict(sorted(counters.items())),
    }


def write_run_summary(output_dir: str, data: dict) -> str:
    """Writes `<output_dir>/run_summary.json` (last: its presence marks a complete run)."""
    path = _join(output_dir, SUMMARY_NAME)
    with io_files.write_output(path) as f:  # a full disk: one line, no half-written summary
        f.write((json.dumps(data, indent=2, sort_keys=False, default=str) + "\n").encode())
    return path


def sample_accounting(counters: dict[str, int]) -> dict:
    """Seeds in = subgraphs out + seeds rejected (by reason); link prediction's negative
    examples (counter `negatives`) are subgraphs out that no seed row stands for."""
    rejected = {
        "not_in_seed_node_set": counters.get("seeds_not_in_node_set", 0),
    }
    seeds_in = counters.get("seeds_in", 0)
    subgraphs = counters.get("subgraphs", 0)
    negatives = counters.get("negatives", 0)
    out = {
        "seeds_in": seeds_in,
        "subgraphs_out": subgraphs,
        "seeds_rejected": {"total": sum(rejected.values()), **rejected},
        "balanced": seeds_in == subgraphs - negatives + sum(rejected.values()),
    }
    if negatives:
        out["negatives_out"] = negatives
        out["negatives_that_are_edges"] = counters.get("negatives_that_are_edges", 0)
    return out


def beam_counters(result, namespaces=("sampler", "partition")) -> dict[str, int]:
    """{name: value} of the run's Beam counters in `namespaces` (committed, else attempted)."""
    out: dict[str, int] = {}
    for counter in result.metrics().query()["counters"]:
        if counter.key.metric.namespace in namespaces:
            name = counter.key.metric.name
            out[name] = out.get(name, 0) + (counter.committed or counter.attempted or 0)
    return dict(sorted(out.items()))


def partition_accounting(graph, report: dict, counters: dict[str, int]) -> dict:
    """Every node and edge read is inner in exactly one partition, or rejected with a reason.

    Nodes of a set with a table: rows read = inner + duplicate ids dropped. Nodes of a latent
    set are the distinct ids at its edge ends (all inner). Edges: rows read = inner (owned by
    their target's partition) + edges with a missing endpoint dropped.
    """
    from sampler.partition.graph import GraphTypes

    types = GraphTypes.from_graph(graph)
    nodes = {}
    for name in types.ntypes:
        inner = int(sum(report["node_balance"][name]["counts"]))
        entry = {"inner": inner}
        if graph.node_sets[name].filename:
            entry["read"] = counters.get(f"rows_read/{name}", 0)
            entry["rejected"] = {"duplicate_id": counters.get(f"duplicate_node_ids/{name}", 0)}
            entry["balanced"] = entry["read"] == inner + sum(entry["rejected"].values())
        else:
            entry["latent"] = True
        nodes[name] = entry
    edges = {}
    for e, (_, name, _) in enumerate(types.etypes):
        inner = int(report["edge_cut_per_etype"][types.canonical(e)]["edges"])
        rejected = {"missing_endpoint": counters.get(f"edges_with_missing_endpoint/{name}", 0)}
        read = counters.get(f"rows_read/{name}", 0)
        edges[name] = {
            "read": read,
            "inner": inner,
            "rejected": rejected,
            "balanced": read == inner + sum(rejected.values()),
        }
    return {"nodes": nodes, "edges": edges}


# Graph inconsistencies: (counter prefix, what it means, default behaviour). `--strict`
# names the ones that fail the run instead (after it, before its completion markers).
GRAPH_CHECKS = {
    "dangling_edges": ("edges_with_missing_endpoint/", "edges with an endpoint not in its node set", "dropped"),
    "duplicate_ids": ("duplicate_node_ids/", "duplicate node ids", "first row by content kept"),
    "missing_seeds": ("seeds_not_in_node_set", "seeds not in the seed node set", "no subgraph"),
    "self_loops": ("self_loops/", "self-loops", "kept"),
    "parallel_edges": ("parallel_edges/", "parallel edges", "kept"),
    "empty_sets": ("", "empty node or edge sets", "allowed"),
}  # fmt: skip


def parse_strict(text: str | None) -> set[str]:
    """The checks named by --strict ('all' for every one); UserError for an unknown name."""
    names = {n.strip() for n in (text or "").split(",") if n.strip()}
    if "all" in names:
        return set(GRAPH_CHECKS)
    unknown = sorted(names - set(GRAPH_CHECKS))
    if unknown:
        raise UserError(
            f"--strict {text}: unknown check '{unknown[0]}'; use some of "
            f"{','.join(GRAPH_CHECKS)} (or all)"
        )
    return names


def graph_issues(graph, counters: dict[str, int]) -> dict[str, dict[str, int]]:
    """{check: {set name (or 'seeds'): count}} of the inconsistencies a run met (non-zero)."""
    issues: dict[str, dict[str, int]] = {}
    for check, (prefix, _, _) in GRAPH_CHECKS.items():
        if not prefix:
            continue
        found = {
            (name[len(prefix) :] or "seeds"): value
            for name, value in counters.items()
            if value and (name.startswith(prefix) if prefix.endswith("/") else name == prefix)
        }
        if found:
            issues[check] = dict(sorted(found.items()))
    empty = {
        name: 0
        for name, info in [*graph.node_sets.items(), *graph.edge_sets.items()]
        if info.filename and not counters.get(f"rows_read/{name}", 0)
    }
    if empty:
        issues["empty_sets"] = empty
    return issues


def check_strict(issues: dict[str, dict[str, int]], strict: set[str]) -> None:
    """UserError naming the first inconsistency that --strict makes fatal."""
    for check in GRAPH_CHECKS:
        if check in strict and check in issues:
            what = GRAPH_CHECKS[check][1]
            found = ", ".join(
                f"{name}" if check == "empty_sets" else f"{name} {count:,}"
                for name, count in issues[check].items()
            )
            raise UserError(f"--strict {check}: the input has {what} ({found})")
