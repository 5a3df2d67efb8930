"""Partition the demo graph for GraphStorm and train node classification on it, on this host.

    .venv/bin/python examples/graphstorm_local.py [--graph_schema out/demo/graph] \
        [--num_parts 1] [--part_method random] [--epochs 3] [--workdir out/graphstorm] \
        [--gs_python .venv-gs/bin/python] [--report r.json] [--timeout 600]

Three steps, each a subprocess:

  1. Without --graph_schema: the demo graph (2,000 MAG-shaped papers, seed 0, as
     `pipelines.demo` and `pipelines.generate` make it) in WORKDIR/graph.
  2. `python -m pipelines.partition --layout graphstorm --split paper:0.8,0.1,0.1
     --balance_ntypes train_mask` into WORKDIR/parts: no hand edits after it.
  3. GraphStorm 0.5.0's own launcher, `python -m graphstorm.run.gs_node_classification`, in
     the side venv of scripts/setup_graphstorm.sh: a 2-layer RGCN on `paper:feat`
     predicting `paper/label`, then `--save-embed-path` (embeddings remapped to the
     Unigraph ids through raw_id_mappings/).

One part runs in GraphStorm's one-machine mode (no --ip-config). More parts need one machine
each, which GraphStorm's launcher reaches with ssh; here every machine is simulated on this
host, like examples/distdgl_local.py does, but with a network of its own:

  * one user namespace ("the lab", `unshare -Urn`) holds a bridge; each machine is a network
    and mount namespace inside it with its own address (198.18.0.i, the range RFC 2544 sets
    aside for test networks; nothing leaves the lab) on a veth port of the bridge, and its
    own /dev/shm (DGL names its shared memory after the graph, so two servers sharing one
    /dev/shm would overwrite each other's partition);
  * a DGL client finds its machine by matching its addresses against ip_config and then
    initialises each new DistTensor (GraphStorm's learnable embeddings) on its own machine's
    servers only, so every machine's trainers must run on that machine: a shared address
    (127.0.0.1 everywhere) would make them all machine 0 and leave the tensors of part 1
    missing on its server;
  * GraphStorm's launcher runs on machine 0 and finds `ssh` on PATH: this script (--_ssh),
    which runs the command on the machine with that address (nsenter), as sshd would;
  * everything is bounded by --timeout; every process this starts is killed on the way out.

Prints one JSON line (accuracies, embedding rows, seconds) and writes it to --report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)
NUM_CLASSES = 349  # the demo graph's venues (sampler/tools/synthetic.py MAG_NUM_LABELS)
MACHINES_ENV = "GRAPHSTORM_LOCAL_MACHINES"  # address=pid of each machine, for --_ssh

CONFIG = """\
---
version: 1.0
gsf:
  basic:
    backend: gloo
    verbose: false
    model_encoder_type: rgcn
    node_feat_name:
      - paper:feat
  gnn:
    num_layers: 2
    hidden_size: 64
    fanout: "10,10"
    use_mini_batch_infer: true
  hyperparam:
    dropout: 0.
    lr: 0.01
    num_epochs: {epochs}
    batch_size: 128
    eval_batch_size: 512
    wd_l2norm: 0
  rgcn:
    num_bases: -1
    use_self_loop: true
    sparse_optimizer_lr: 1e-2
    use_node_embeddings: false
  node_classification:
    target_ntype: paper
    label_field: label
    multilabel: false
    num_classes: {num_classes}
"""


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph_schema", default="", help="a Unigraph (default: the demo graph)")
    parser.add_argument("--num_parts", type=int, default=1)
    parser.add_argument("--part_method", default="random", help="random, metis or lp")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workdir", default="out/graphstorm", help="graph, parts, embeddings")
    parser.add_argument("--gs_python", default=os.path.join(ROOT, ".venv-gs", "bin", "python"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for training")
    parser.add_argument("--report", default="", help="write the result here (JSON)")
    parser.add_argument("--_ssh", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run(cmd: list[str], timeout: float, env: dict | None = None) -> str:
    """Runs a step in its own process group; its output, or exit 1 with the output's tail."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        out += f"\n(timed out after {timeout:.0f} s)"
        proc.returncode = 1
    finally:
        kill_group(proc)
    if proc.returncode != 0:
        print(out[-6000:], file=sys.stderr)
        print(f"error: {shlex.join(cmd[:4])} ... failed", file=sys.stderr)
        raise SystemExit(1)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """The process group of `proc` (it started a session), leftovers included."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if sig == signal.SIGTERM:
            time.sleep(0.5)


class Lab:
    """The simulated machines: holder processes of the lab's namespaces (see the docstring)."""

    def __init__(self, count: int, timeout: float):
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                print(f"error: `{tool}` (util-linux, iproute2) is needed to simulate machines")
                raise SystemExit(2)
        self.holders: list[subprocess.Popen] = []
        self.addresses = [f"198.18.0.{i + 1}" for i in range(count)]
        try:
            self._build(count, timeout)
        except BaseException:
            self.close()
            raise

    def _build(self, count: int, timeout: float) -> None:
        sleep = f"exec sleep {int(timeout) + 60}"
        lab = self._hold(["unshare", "-Urn", "sh", "-c", sleep])
        self.lab = lab.pid
        enter = ["nsenter", "-t", str(self.lab), "-U", "-n", "--preserve-credentials"]
        self.machines = []
        for _ in range(count):
            shm = f"mount -t tmpfs tmpfs /dev/shm && {sleep}"
            self.machines.append(self._hold([*enter, "unshare", "-nm", "sh", "-c", shm]).pid)
        commands = [["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "br0", "type", "bridge"],
                    ["ip", "link", "set", "br0", "up"]]  # fmt: skip
        for i, pid in enumerate(self.machines):
            port = f"gsv{i}"
            commands += [
                ["ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(pid)],
                ["ip", "link", "set", port, "master", "br0", "up"],
            ]  # fmt: skip
        for command in commands:
            run([*enter, *command], 30)
        for pid, address in zip(self.machines, self.addresses, strict=True):
            inside = ["nsenter", "-t", str(pid), "-U", "-n", "--preserve-credentials"]
            for command in (["ip", "addr", "add", f"{address}/24", "dev", "eth0"],
                            ["ip", "link", "set", "eth0", "up"], ["ip", "link", "set", "lo", "up"]):  # fmt: skip
                run([*inside, *command], 30)

    def _hold(self, cmd: list[str]) -> subprocess.Popen:
        """Starts a namespace holder; returns once it is `sleep` (its namespaces are made)."""
        holder = subprocess.Popen(cmd, start_new_session=True)
        self.holders.append(holder)
        deadline = time.monotonic() + 30
        while not _cmdline(holder.pid).startswith("sleep"):
            if holder.poll() is not None or time.monotonic() > deadline:
                print(f"error: could not make the namespaces ({shlex.join(cmd)})", file=sys.stderr)
                raise SystemExit(1)
            time.sleep(0.05)
        return holder

    def on(self, machine: int) -> list[str]:
        """The command prefix that runs a command on a machine."""
        return ["nsenter", "-t", str(self.machines[machine]), "-U", "-n", "-m",
                "--preserve-credentials"]  # fmt: skip

    def env(self) -> str:
        return ",".join(f"{a}={p}" for a, p in zip(self.addresses, self.machines, strict=True))

    def close(self) -> None:
        for holder in reversed(self.holders):
            kill_group(holder)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def ssh(argv: list[str]) -> int:
    """`ssh [-o X] [-p PORT] [-l USER] HOST COMMAND` as GraphStorm's launcher calls it: runs
    COMMAND on the simulated machine with address HOST."""
    args = list(argv)
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("-o", "-p", "-l", "-i") and args:
            args.pop(0)
    if len(args) < 2:
        print(f"ssh (graphstorm_local): no command in {argv}", file=sys.stderr)
        return 255
    host, command = args[0].rpartition("@")[2], " ".join(args[1:])
    machines = dict(item.split("=") for item in os.environ[MACHINES_ENV].split(","))
    if host not in machines:
        print(f"ssh (graphstorm_local): no machine {host}", file=sys.stderr)
        return 255
    pid = machines[host]
    enter = ["nsenter", "-t", pid, "-n", "-m"]
    if os.readlink("/proc/self/ns/user") != os.readlink(f"/proc/{pid}/ns/user"):
        enter += ["-U", "--preserve-credentials"]
    # gloo (torch.distributed) binds the address of the interface it is told, not the
    # hostname's (which would not resolve to the machine's own address here).
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0"}
    return subprocess.call([*enter, "sh", "-c", command], env=env)


def partition(args, python: str) -> tuple[str, str]:
    """Steps 1 and 2: the graph and its partition folder; (schema, part config)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    schema = args.graph_schema
    if not schema:
        schema = os.path.join(args.workdir, "graph")
        run([python, "-m", "pipelines.generate", "--num_papers", "2000", "--seed", "0",
             "--output_dir", schema, "--format", "parquet"], 600, env)  # fmt: skip
    parts = os.path.join(args.workdir, "parts")
    out = run([python, "-m", "pipelines.partition", "--graph_schema", schema,
               "--output_dir", parts, "--graph_name", "mag",
               "--num_parts", str(args.num_parts), "--part_method", args.part_method,
               "--layout", "graphstorm", "--split", "paper:0.8,0.1,0.1",
               "--balance_ntypes", "train_mask", "--overwrite"], 600, env)  # fmt: skip
    print(out.strip())
    return schema, os.path.join(parts, "mag.json")


def train(args, part_config: str) -> dict:
    """Step 3: GraphStorm's launcher, on one machine or on simulated ones."""
    work = os.path.abspath(args.workdir)
    config = os.path.join(work, "nc.yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(epochs=args.epochs, num_classes=NUM_CLASSES))
    embeddings = os.path.join(work, "embeddings")
    shutil.rmtree(embeddings, ignore_errors=True)
    cmd = [args.gs_python, "-m", "graphstorm.run.gs_node_classification",
           "--workspace", work, "--part-config", os.path.abspath(part_config),
           "--num-trainers", "1", "--num-servers", "1", "--num-samplers", "0",
           "--cf", config, "--save-embed-path", embeddings]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the side venv is its own world
    lab = None
    temp = tempfile.mkdtemp(prefix="graphstorm-local-")
    try:
        if args.num_parts > 1:
            lab = Lab(args.num_parts, args.timeout)
            ip_config = os.path.join(temp, "ip_config.txt")
            with open(ip_config, "w") as f:
                f.writelines(f"{address} 30050\n" for address in lab.addresses)
            bin_dir = os.path.join(temp, "bin")
            os.mkdir(bin_dir)
            with open(os.path.join(bin_dir, "ssh"), "w") as f:
                python, script = shlex.quote(sys.executable), shlex.quote(SCRIPT)
                f.write(f'#!/bin/sh\nexec {python} {script} --_ssh "$@"\n')
            os.chmod(os.path.join(bin_dir, "ssh"), 0o755)
            env["PATH"] = f"{bin_dir}:{env['PATH']}"
            env[MACHINES_ENV] = lab.env()
            env["GLOO_SOCKET_IFNAME"] = "eth0"
            cmd = [*lab.on(0), *cmd, "--ip-config", ip_config, "--ssh-port", "22"]
        start = time.monotonic()
        log = run(cmd, args.timeout, env)
        seconds = time.monotonic() - start
    finally:
        if lab is not None:
            lab.close()
        shutil.rmtree(temp, ignore_errors=True)
    with open(os.path.join(work, "graphstorm.log"), "w") as f:
        f.write(log)
    return {"log": log, "seconds": seconds, "embeddings": embeddings}


def score(log: str, name: str) -> float:
    found = re.findall(rf"{name}: {{'accuracy': ([0-9.]+)}}", log)
    if not found:
        print(log[-4000:], file=sys.stderr)
        print(f"error: GraphStorm reported no {name}", file=sys.stderr)
        raise SystemExit(1)
    return float(found[-1])


def embedding_rows(folder: str, python: str) -> dict:
    """Rows and a few ids of the remapped paper embeddings (read with the side venv's pyarrow:
    this script itself imports only the standard library)."""
    code = (
        "import json, sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]);"
        "print(json.dumps({'rows': t.num_rows, 'columns': t.column_names,"
        " 'dim': len(t.column('emb')[0]), 'ids': t.column('nid').to_pylist()[:3]}))"
    )
    out = run([python, "-c", code, os.path.join(folder, "paper")], 120)
    rows = json.loads(out.strip().splitlines()[-1])
    rows["files"] = len(os.listdir(os.path.join(folder, "paper")))  # one per trainer
    return rows


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args._ssh is not None:
        return ssh(args._ssh)
    if not os.path.exists(args.gs_python):
        print(f"error: {args.gs_python} not found; run scripts/setup_graphstorm.sh first")
        return 2
    os.makedirs(args.workdir, exist_ok=True)
    start = time.monotonic()
    _, part_config = partition(args, sys.executable)
    trained = train(args, part_config)
    result = {
        "num_parts": args.num_parts,
        "part_method": args.part_method,
        "epochs": args.epochs,
        "best_val_accuracy": score(trained["log"], "best_val_score"),
        "best_test_accuracy": score(trained["log"], "best_test_score"),
        "embeddings": embedding_rows(trained["embeddings"], args.gs_python),
        "embeddings_dir": trained["embeddings"],
        "train_seconds": round(trained["seconds"], 1),
        "total_seconds": round(time.monotonic() - start, 1),
    }
    print(json.dumps(result))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
