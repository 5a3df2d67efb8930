"""Benchmark: reading a set in BigQuery through the emulator, against the emulator's own rate.

Starts bqemulator (tests/bigquery_emulator.py), loads a node table of N rows (`id` STRING, a
32-float REPEATED `feat`, an INT64 `label`), then measures in one run, alternating:

  raw     the emulator's own Arrow read rate: a read session on the table (the same columns
          and streams as ours) read by the bare Storage Read client, each message decoded
          into an Arrow record batch and nothing more;
  ours    the project's reader on the same table: `graph_tables.set_files` (our session) and
          `graph_tables.read_node_file` per stream (canonical columns, checks, bad-row
          accounting, fingerprinted ids: what every stage reads).

on both runners:

  InMemory  the streams read on threads (one per core), as `--runner InMemory` reads them;
  Beam      one element per stream, spread (Reshuffle) over 2 SDK worker processes of the
            local FnApiRunner (multi_processing), read by a DoFn; the rate counts the reading
            only: rows / (last read's end - first read's start), pipeline start-up excluded.

Each rate is rows per wall second; the emulator's CPU seconds (its process, /proc) are printed
beside. The ratio ours/raw is the figure of merit (the target: at least 0.5).

  PYTHONPATH=$PWD python scripts/bench_bigquery.py [--rows 300000] [--repeats 3] [--json out]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sampler.features import FeatureSpec  # noqa: E402
from sampler.io import bigquery_source, graph_tables  # noqa: E402
from sampler.schema import NodeSetInfo  # noqa: E402
from sampler.threads import cpu_count, map_threads  # noqa: E402
from tests.bigquery_emulator import PROJECT, BigQueryEmulator  # noqa: E402

WIDTH = 32
SPECS = {"feat": FeatureSpec("feat", "float", (WIDTH,)), "label": FeatureSpec("label", "int", ())}
TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def node_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(0)
    feat = rng.standard_normal((rows, WIDTH)).astype(np.float32)
    return pa.table(
        {
            "id": pa.array([f"n{i}" for i in range(rows)]),
            "feat": pa.ListArray.from_arrays(
                pa.array(np.arange(0, rows * WIDTH + 1, WIDTH, dtype=np.int32)),
                pa.array(feat.reshape(-1)),
            ),
            "label": pa.array(rng.integers(0, 350, rows)),
        }
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the two readers


def raw_streams(table: str) -> tuple[list[str], bytes]:
    """A read session on `table` by the bare client: (stream names, Arrow schema bytes)."""
    from google.cloud.bigquery_storage_v1 import types

    from sampler.io import bigquery_client, bigquery_reader

    client = bigquery_client.read_client()
    session = client.create_read_session(
        parent=f"projects/{PROJECT}",
        read_session=types.ReadSession(
            table=table,
            data_format=types.DataFormat.ARROW,
            read_options=types.ReadSession.TableReadOptions(selected_fields=["id", *SPECS]),
        ),
        max_stream_count=bigquery_reader.MAX_STREAMS,
    )
    return [s.name for s in session.streams], session.arrow_schema.serialized_schema


def raw_read(stream: str, schema_bytes: bytes) -> int:
    from sampler.io import bigquery_client

    schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
    rows = 0
    for response in bigquery_client.read_client().read_rows(read_stream=stream, offset=0):
        data = response.arrow_record_batch.serialized_record_batch
        rows += pa.ipc.read_record_batch(pa.py_buffer(data), schema).num_rows
    return rows


def our_read(unit: tuple[str, str], info: NodeSetInfo) -> int:
    return sum(len(batch) for batch in graph_tables.read_node_file(*unit, info))


# --------------------------------------------------------------------------- runners


def in_memory(work, units) -> tuple[int, float]:
    start = time.monotonic()
    rows = sum(map_threads(work, units, cpu_count()))
    return rows, time.monotonic() - start


def on_beam(work, units) -> tuple[int, float]:
    import apache_beam as beam

    from pipelines.runtime.runner import new_pipeline

    def timed(unit):
        start = time.time()
        rows = work(unit)
        yield rows, start, time.time()

    pipeline = new_pipeline(TWO_WORKERS, None)
    out = Path(tempfile.mkdtemp(prefix="bench-bigquery-")) / "reads.jsonl"
    _ = (
        pipeline
        | "Streams" >> beam.Create(units)
        | "Spread" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(timed)
        | "Json" >> beam.Map(json.dumps)
        | "Write" >> beam.io.WriteToText(str(out), shard_name_template="")
    )
    pipeline.run().wait_until_finish()
    reads = [json.loads(line) for line in out.read_text().splitlines()]
    shutil.rmtree(out.parent)
    rows = sum(r[0] for r in reads)
    return rows, max(r[2] for r in reads) - min(r[1] for r in reads)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runners", default="InMemory,Beam")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)  # the SDK workers' start-up notes
    emulator = BigQueryEmulator().start()
    os.environ["BEAM_GRAPH_BIGQUERY_EMULATOR_HOST"] = emulator.hosts
    os.environ["GOOGLE_CLOUD_PROJECT"] = PROJECT
    try:
        full = emulator.load("bench.nodes", node_table(args.rows))
        table = "projects/{}/datasets/{}/tables/{}".format(*full.split("."))
        source = bigquery_source.source_name(
            bigquery_source.BigQuerySource(dataset="bench", table="nodes")
        )
        info = NodeSetInfo("nodes", SPECS, source)
        figures = {"rows": args.rows, "cores": cpu_count(), "load": os.getloadavg()}
        server = emulator.process.pid
        for runner in args.runners.split(","):
            run = in_memory if runner == "InMemory" else on_beam
            rates = {"raw": [], "ours": []}
            server_cpu = {"raw": [], "ours": []}
            for _ in range(args.repeats):
                for kind in ("raw", "ours"):
                    if kind == "raw":
                        streams, schema = raw_streams(table)
                        units = [(s, schema) for s in streams]
                        work = _Raw()
                    else:
                        from sampler.io import bigquery_reader

                        bigquery_reader._SESSIONS.clear()  # a new session, as raw has
                        units = graph_tables.set_files(info)
                        work = _Ours(info)
                    before = cpu_seconds(server)
                    rows, seconds = run(work, units)
                    assert rows == args.rows, (kind, rows)
                    server_cpu[kind].append(cpu_seconds(server) - before)
                    rates[kind].append(rows / seconds)
                    print(
                        f"{runner:8s} {kind:4s} {len(units):3d} streams "
                        f"{rows / seconds:10,.0f} rows/s  emulator CPU {server_cpu[kind][-1]:.2f} s",
                        flush=True,
                    )
            raw, ours = (statistics.median(rates[k]) for k in ("raw", "ours"))
            figures[runner] = {
                "raw_rows_per_s": raw,
                "ours_rows_per_s": ours,
                "ratio": ours / raw,
                "emulator_cpu_s": {k: statistics.median(v) for k, v in server_cpu.items()},
            }
            print(
                f"{runner}: ours {ours:,.0f} rows/s, raw {raw:,.0f} rows/s, ratio {ours / raw:.2f}"
            )
        figures["load_after"] = os.getloadavg()
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
        print(json.dumps(figures))
    finally:
        emulator.close()


class _Raw:
    """Picklable work for Beam: the bare client's read of one (stream, schema)."""

    def __call__(self, unit) -> int:
        return raw_read(*unit)


class _Ours:
    def __init__(self, info: NodeSetInfo):
        self.info = info

    def __call__(self, unit) -> int:
        return our_read(unit, self.info)


if __name__ == "__main__":
    main()
