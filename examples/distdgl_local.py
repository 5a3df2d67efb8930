"""Serve the partition stage's output with real DistDGL servers on this host and sample from it.

    /work/main/.venv-dgl/bin/python examples/distdgl_local.py --part_config out/parts/mag.json \
        [--ntype paper] [--fanouts 5,5] [--batch_size 32] [--num_trainers 1] [--report r.json]

Runs with DGL 2.1.0 and torch (the side venv of scripts/setup_dgl_oracle.sh), not the project's
venv. Every partition is one simulated machine: a DistGraph server (DGL_ROLE=server) loads it,
and trainers (DGL_DIST_MODE=distributed) connect, build a `dgl.distributed.DistGraph`, split the
`--ntype` nodes with `dgl.distributed.node_split` and run `dgl.dataloading.DistNodeDataLoader`
with a `NeighborSampler` for one epoch, fetching the sampled nodes' features through the
servers. Each trainer checks every sampled node id (in range of its type, seeds its own) and
writes what it saw to --report.

What this has to get around, on one host:

  * DGL names its shared-memory segments after the graph and data names only, so two servers
    on one host overwrite each other's partition. Each simulated machine therefore runs in
    its own mount namespace with a private /dev/shm (`unshare -Urm`, then a tmpfs on
    /dev/shm); sockets stay shared, so all of them talk over 127.0.0.1.
  * A client finds "its" machine by matching its addresses against ip_config; with every
    machine on 127.0.0.1 that is machine 0, so the trainers run in machine 0's namespace
    (they read partition 0 locally and the others through RPC, as trainers do on a cluster).
  * Every wait is bounded (--timeout); every process this starts (one process group per
    machine) is killed on failure or timeout, and the temporary folder is removed.

On a real cluster use DGL's launch tool instead (docs/partitioning.md, "Serving the
partitions with DistDGL").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SCRIPT = os.path.abspath(__file__)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part_config", required=True, help="<output_dir>/<graph_name>.json")
    parser.add_argument("--ntype", default="paper", help="node type of the seeds")
    parser.add_argument("--feature", default="feat", help="node feature to fetch ('' for none)")
    parser.add_argument("--fanouts", default="5,5", help="neighbours per layer, comma-separated")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_trainers", type=int, default=1, help="trainer processes in all")
    parser.add_argument("--max_steps", type=int, default=0, help="stop after N batches (0: epoch)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for the whole run")
    parser.add_argument("--report", default="", help="write the trainers' results here (JSON)")
    # Internal: the roles the launcher starts.
    parser.add_argument("--_machine", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--_workdir", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def free_ports(count: int) -> list[int]:
    """`count` ports free on 127.0.0.1, each followed by a free one (DGL uses port + s)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 1 < 65536 and all(abs(port - p) > 1 for p in ports):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            ports.append(port)
    return ports


def dgl_env(args, workdir: str, role: str) -> dict:
    """The variables DGL's launch tool sets (tools/launch.py, DGL 2.1.0)."""
    return {
        **os.environ,
        "DGL_DIST_MODE": "distributed",
        "DGL_ROLE": role,
        "DGL_NUM_SAMPLER": "0",
        "DGL_NUM_CLIENT": str(args.num_trainers),
        "DGL_CONF_PATH": os.path.abspath(args.part_config),
        "DGL_IP_CONFIG": os.path.join(workdir, "ip_config.txt"),
        "DGL_NUM_SERVER": "1",
        "DGL_GRAPH_FORMAT": "csc",
        "DGL_GROUP_ID": "0",
        "OMP_NUM_THREADS": "1",
        # Bounded connection retries (DGL's defaults wait for minutes).
        "DGL_DIST_MAX_TRY_TIMES": str(max(10, int(args.timeout))),
    }


def kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the group, if any
            except (ProcessLookupError, PermissionError):
                pass
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def wait_all(procs: list[subprocess.Popen], deadline: float) -> list[int | None]:
    """Wait until every process ended or one failed or the deadline passed."""
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
            return codes
        time.sleep(0.2)
    return [p.poll() for p in procs]


def launch(args) -> int:
    """Start one private-/dev/shm namespace per partition; collect the trainers' reports."""
    with open(args.part_config) as f:
        num_parts = json.load(f)["num_parts"]
    if shutil.which("unshare") is None:
        print("error: `unshare` (util-linux) is needed to give each server its own /dev/shm")
        return 2
    workdir = tempfile.mkdtemp(prefix="distdgl-local-")
    procs: list[subprocess.Popen] = []
    try:
        with open(os.path.join(workdir, "ip_config.txt"), "w") as f:
            f.writelines(f"127.0.0.1 {port}\n" for port in free_ports(num_parts))
        deadline = time.monotonic() + args.timeout
        for machine in range(num_parts):
            cmd = [
                "unshare", "-Urm", "sh", "-c",
                'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"',
                sys.executable, SCRIPT, *sys.argv[1:],
                "--_machine", str(machine), "--_workdir", workdir,
            ]  # fmt: skip
            log = open(os.path.join(workdir, f"machine{machine}.log"), "w")  # noqa: SIM115
            procs.append(
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
            log.close()
        codes = wait_all(procs, deadline)
        if codes != [0] * num_parts:
            why = "timed out" if None in codes else f"exit codes {codes}"
            for machine in range(num_parts):
                with open(os.path.join(workdir, f"machine{machine}.log")) as f:
                    tail = f.read()[-3000:]
                print(f"--- machine {machine} ---\n{tail}", file=sys.stderr)
            print(f"error: the local DistDGL run failed ({why})", file=sys.stderr)
            return 1
        trainers = []
        for rank in range(args.num_trainers):
            with open(os.path.join(workdir, f"trainer{rank}.json")) as f:
                trainers.append(json.load(f))
        result = {
            "num_parts": num_parts,
            "num_trainers": args.num_trainers,
            "batches": sum(t["batches"] for t in trainers),
            "seeds": sum(t["seeds"] for t in trainers),
            "trainers": trainers,
        }
        print(json.dumps(result))
        if args.report:
            with open(args.report, "w") as f:
                json.dump(result, f, indent=1)
        return 0
    finally:
        for proc in procs:
            kill_group(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def machine(args) -> int:
    """Inside a simulated machine's namespace: its server, and on machine 0 the trainers."""
    env = dgl_env(args, args._workdir, "server")
    cmd = [sys.executable, SCRIPT, "--part_config", args.part_config]
    server = subprocess.Popen(cmd, env={**env, "DGL_SERVER_ID": str(args._machine)})
    procs = [server]
    if args._machine == 0:
        for rank in range(args.num_trainers):
            env = {**dgl_env(args, args._workdir, "client"), "TRAINER_RANK": str(rank)}
            procs.append(subprocess.Popen([sys.executable, SCRIPT, *sys.argv[1:]], env=env))
    # The launcher bounds the whole run and kills this process group when it is over; a
    # process that fails ends this one at once (its server would wait for clients forever).
    while True:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes):
            return 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.2)


def serve(args) -> int:
    import dgl

    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])  # serves, then exits
    return 0


def train(args) -> int:
    import dgl
    import torch

    with open(args.part_config) as f:
        graph_name = json.load(f)["graph_name"]
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    g = dgl.distributed.DistGraph(graph_name, part_config=args.part_config)
    ntype = args.ntype
    mask = torch.ones(g.num_nodes(ntype), dtype=torch.bool)
    seeds = dgl.distributed.node_split(mask, g.get_partition_book(), ntype=ntype, force_even=True)
    fanouts = [int(x) for x in args.fanouts.split(",")]
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DistNodeDataLoader(
        g, {ntype: seeds}, sampler, batch_size=args.batch_size, shuffle=True, drop_last=False
    )
    num_nodes = {t: g.num_nodes(t) for t in g.ntypes}
    own = set(seeds.tolist())
    batches = seen = 0
    input_nodes_total = 0
    feature_dim = None
    for input_nodes, output_nodes, blocks in loader:
        if not isinstance(input_nodes, dict):  # one node type
            input_nodes, output_nodes = {ntype: input_nodes}, {ntype: output_nodes}
        out = output_nodes[ntype]
        if not set(out.tolist()) <= own:
            raise AssertionError(f"batch {batches} has seeds outside this trainer's split")
        for t, ids in input_nodes.items():
            if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes[t]):
                raise AssertionError(f"batch {batches}: {t} ids outside [0, {num_nodes[t]})")
        if len(blocks) != len(fanouts):
            raise AssertionError(f"{len(blocks)} blocks for {len(fanouts)} fanouts")
        if args.feature and ntype in input_nodes:
            x = g.nodes[ntype].data[args.feature][input_nodes[ntype]]
            feature_dim = int(x.shape[1]) if x.dim() > 1 else 1
            if not bool(torch.isfinite(x).all()):
                raise AssertionError(f"batch {batches}: non-finite {args.feature}")
        batches += 1
        seen += len(out)
        input_nodes_total += sum(len(v) for v in input_nodes.values())
        if args.max_steps and batches >= args.max_steps:
            break
    rank = int(os.environ["TRAINER_RANK"])
    report = {
        "rank": g.rank(),
        "split": len(seeds),
        "batches": batches,
        "seeds": seen,
        "input_nodes": input_nodes_total,
        "num_nodes": num_nodes,
        "feature_dim": feature_dim,
    }
    workdir = os.path.dirname(os.environ["DGL_IP_CONFIG"])
    with open(os.path.join(workdir, f"trainer{rank}.json"), "w") as f:
        json.dump(report, f)
    print(json.dumps(report))
    dgl.distributed.exit_client()
    return 0


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    role = os.environ.get("DGL_ROLE")
    if role == "server":
        return serve(args)
    if role == "client":
        return train(args)
    if args._machine >= 0:
        return machine(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
