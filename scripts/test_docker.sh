#!/usr/bin/env bash
# Builds docker/Dockerfile, unchanged, with podman and checks the image it makes (offline):
#   base     a stand-in for apache/beam_python3.11_sdk:2.77.0 made from Debian packages
#            (debootstrap), cached between runs; the registry is not needed
#   build    `podman build -f docker/Dockerfile .` on that base
#   demo     `python -m pipelines.demo` in the image
#   stages   `sample` and `partition` in the image, as its runtime user, on a graph mounted
#            from the host: the same bytes as the same runs on the host
#   kernels  the compiled kernels load from the image's cache without compiling
#   portable a Beam job on the portable runner whose SDK workers are a worker pool running in
#            the image (--environment_type=EXTERNAL): the same records as the local runner's
#   launch   scripts/launch_dataflow.sh's docker launcher runs the stage in the image up to the
#            job submission: gs:// on a local GCS emulator, the job request to a stand-in of
#            the Dataflow API (tests/fake_dataflow.py) on 127.0.0.1:80
#
#   bash scripts/test_docker.sh [--build-only]
#
# Needs root, the checkout's .venv (scripts/bootstrap.sh) for the host's runs, and podman,
# runc and debootstrap (installed with apt-get when missing). Exit
# status: 0 passed; 1 a step failed (the last line names it; its log is kept under the
# cache's logs/ folder); 77 this machine cannot run it (one line says why). Every step has a
# time limit, and no container is left behind, also after a failure or SIGTERM.
# BEAM_GRAPH_DOCKER_CACHE (default /var/cache/beam-graph-docker) holds the base image's root
# file system, podman's private storage and configuration, and the logs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
self="$root/scripts/test_docker.sh"
cache="${BEAM_GRAPH_DOCKER_CACHE:-/var/cache/beam-graph-docker}"
base_image=docker.io/apache/beam_python3.11_sdk:2.77.0
image=localhost/beam-graph-sampler:test
suite=bookworm # Debian 12: Python 3.11, the pinned Python

export CONTAINERS_CONF="$cache/containers.conf"
export CONTAINERS_STORAGE_CONF="$cache/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$cache/registries.conf"

say() { echo "test_docker: $*"; }

# ---------------------------------------------------------------------------------------------
# Steps. Each runs in its own process (`bash test_docker.sh __step NAME`) under `timeout`.

step_base() {
  # The stand-in base: Debian's Python 3.11 in a venv, the host's CA certificates (pip in the
  # build goes through the same TLS proxy as the host's), tagged as Beam's SDK image.
  local rootfs="$cache/rootfs" bundle=/etc/ssl/certs/ca-certificates.crt mirror key
  local changes=(
    "ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    "ENV PIP_CERT=$bundle" "ENV SSL_CERT_FILE=$bundle" "ENV REQUESTS_CA_BUNDLE=$bundle"
    "ENV PIP_DEFAULT_TIMEOUT=180" "ENV LANG=C.UTF-8" "WORKDIR /"
  )
  mirror="$(debian_mirror)"
  key="$(printf '%s\n' "$suite" "$mirror" "${changes[@]}" | cat - "$bundle" | sha256sum | cut -c1-16)"
  if podman image exists "$base_image" && [ "$(cat "$cache/base.key" 2>/dev/null)" = "$key" ]; then
    echo "base image cached ($key)"
    return 0
  fi
  if [ ! -f "$rootfs/.complete" ]; then
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      "$suite" "$rootfs" "$mirror"
    chroot "$rootfs" /usr/bin/python3 -m venv /opt/venv
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    touch "$rootfs/.complete"
  fi
  cp "$bundle" "$rootfs$bundle"
  podman rmi --force "$base_image" >/dev/null 2>&1 || true
  local args=() change
  for change in "${changes[@]}"; do
    args+=(--change "$change")
  done
  tar -C "$rootfs" --exclude=./.complete -c . | podman import "${args[@]}" - "$base_image"
  echo "$key" >"$cache/base.key"
}

step_build() {
  # The builder stage is tagged too, so that pruning keeps its layers: the next build reuses
  # them, and the wheel it copies, and installs the stack again only when the sources change.
  local build=(podman build --pull=never --network host --layers --force-rm -f "$root/docker/Dockerfile")
  "${build[@]}" --target builder -t "$image-builder" "$root"
  "${build[@]}" -t "$image" "$root"
  # The images of earlier builds go.
  podman image prune --force >/dev/null
}

in_image() { # [podman run options...] -- command...: a container of the image, labelled
  local opts=()
  while [ "$1" != -- ]; do
    opts+=("$1")
    shift
  done
  shift
  podman run --rm --label "beam-graph-test=$BEAM_GRAPH_TEST_RUN" "${opts[@]}" "$image" "$@"
}

same_files() { # DIR_A DIR_B: the same file names and bytes (run_summary.json aside: times)
  local a="$1" b="$2" names_a names_b name
  names_a="$(cd "$a" && find . -type f ! -name run_summary.json | sort)"
  names_b="$(cd "$b" && find . -type f ! -name run_summary.json | sort)"
  if [ -z "$names_a" ]; then
    echo "no files in $a"
    return 1
  fi
  if [ "$names_a" != "$names_b" ]; then
    diff <(echo "$names_a") <(echo "$names_b") || true
    echo "$a and $b hold different files"
    return 1
  fi
  while IFS= read -r name; do
    if ! cmp "$a/$name" "$b/$name"; then
      echo "$b/$name differs from $a/$name"
      return 1
    fi
  done <<<"$names_a"
  echo "same bytes: $(wc -l <<<"$names_a") files ($a, $b)"
}

owned_by_image_user() { # FILE WHO: written by the image's runtime user (uid 10001)
  if [ "$(stat -c %u "$1")" != 10001 ]; then
    echo "$1 was not written by $2 (uid 10001)"
    return 1
  fi
}

host_python() { # the host's .venv (scripts/env.sh is sourced for the steps)
  "$root/.venv/bin/python" "$@"
}

free_port() {
  host_python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}

step_demo() {
  # The demo as a user runs it: the image's default user and folder.
  local out
  out="$(in_image -- python -m pipelines.demo --num_papers 500)"
  echo "$out"
  if ! grep -q '^graph: ' <<<"$out"; then
    echo "the demo printed no summary"
    return 1
  fi
}

step_graph() {
  # A graph on the host (readable by the image's user), and the host's own runs on it.
  local work="$BEAM_GRAPH_TEST_WORK"
  host_python -m pipelines.generate --num_papers 400 --output_dir "$work/graph" --write_spec \
    --format parquet --num_shards 2 --edge_weights --all_node_features
  host_python -m pipelines.sample --graph_schema "$work/graph" \
    --sampling_spec "$work/graph/sampling_spec.pbtxt" --output_samples "$work/host/samples/s@3"
  host_python -m pipelines.partition --graph_schema "$work/graph" \
    --output_dir "$work/host/parts" --graph_name g --num_parts 2 --part_method lp
}

step_stages() {
  # The same runs in the image, as its runtime user, on the graph mounted at the same path.
  local work="$BEAM_GRAPH_TEST_WORK"
  install -d -m 0777 "$work/image"
  in_image --volume "$work:$work" -- python -m pipelines.sample --graph_schema "$work/graph" \
    --sampling_spec "$work/graph/sampling_spec.pbtxt" --output_samples "$work/image/samples/s@3"
  in_image --volume "$work:$work" -- python -m pipelines.partition --graph_schema "$work/graph" \
    --output_dir "$work/image/parts" --graph_name g --num_parts 2 --part_method lp
  owned_by_image_user "$work/image/samples/s-00000-of-00003" "the image's runtime user"
  same_files "$work/host/samples" "$work/image/samples"
  same_files "$work/host/parts" "$work/image/parts"
}

step_kernels() {
  # As a worker would: a new container loads every kernel from the image's cache. (numba
  # uses a cache folder only where it may write: in a read-only container it compiles all.)
  local out
  out="$(in_image -- python -m sampler.jit_warm 2>&1)"
  echo "$out"
  if ! grep -q ' (0 compiled)$' <<<"$out"; then
    echo "the kernels were compiled in the container, not loaded from the image's cache"
    return 1
  fi
}

step_portable() {
  # A Beam job on the portable runner (the SDK's local job service, in this process) whose
  # SDK workers are started by Beam's worker pool in the image: the workers that sample are
  # the image's. The same records as the local runner's (step graph).
  local work="$BEAM_GRAPH_TEST_WORK" port
  port="$(free_port)"
  install -d -m 0777 "$work/portable"
  pool="$BEAM_GRAPH_TEST_RUN-pool"
  trap 'podman logs "$pool" >"$BEAM_GRAPH_TEST_LOGS/portable-pool.log" 2>&1 || true
    podman rm --force --time 0 "$pool" >/dev/null 2>&1 || true' EXIT
  podman run --detach --rm --name "$pool" --label "beam-graph-test=$BEAM_GRAPH_TEST_RUN" \
    --volume "$work:$work" "$image" \
    python -m apache_beam.runners.worker.worker_pool_main --service_port "$port" >/dev/null
  if ! host_python - "$port" <<'PY'; then
import socket, sys, time
deadline = time.time() + 120
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
        break
    except OSError:
        if time.time() > deadline:
            raise SystemExit(1)
        time.sleep(0.5)
PY
    echo "the worker pool in the image did not listen on port $port within 120 s"
    return 1
  fi
  host_python -m pipelines.sample --graph_schema "$work/graph" \
    --sampling_spec "$work/graph/sampling_spec.pbtxt" --output_samples "$work/portable/s@3" \
    --runner PortableRunner --job_endpoint embed \
    --environment_type EXTERNAL --environment_config "localhost:$port"
  podman logs "$pool" >"$BEAM_GRAPH_TEST_LOGS/portable-pool.log" 2>&1
  if ! grep -q 'Starting worker with command' "$BEAM_GRAPH_TEST_LOGS/portable-pool.log"; then
    echo "the worker pool in the image started no SDK worker"
    return 1
  fi
  owned_by_image_user "$work/portable/s-00000-of-00003" "the image's SDK workers"
  same_files "$work/host/samples" "$work/portable"
}

step_launch() {
  # scripts/launch_dataflow.sh with its docker launcher (docker is podman here), offline: the
  # stage runs in the image, reads its gs:// inputs from a local GCS emulator, stages the
  # job's files there and submits the job to a stand-in of the Dataflow API on
  # http://localhost (tests/fake_dataflow.py; Beam talks REST to a localhost endpoint), which
  # records the request and answers the job as done: nothing runs.
  local work="$BEAM_GRAPH_TEST_WORK" port job_id=2000-01-01_00_00_00-7 out
  # One stand-in at a time on 127.0.0.1:80, whatever the cache folder of the run.
  exec 8>/tmp/beam-graph-docker-port80.lock
  if ! flock --timeout 300 8; then
    echo "another run of scripts/test_docker.sh held 127.0.0.1:80 for 300 s"
    return 1
  fi
  port="$(free_port)"
  mkdir -p "$work/gcs" "$work/bin" "$work/launch"
  export STORAGE_EMULATOR_HOST="http://127.0.0.1:$port" GCE_METADATA_HOST=127.0.0.1:9
  export GCE_METADATA_IP=127.0.0.1:9 NO_GCE_CHECK=True
  # (The servers are started directly, not through a function: $! is then their own pid.)
  "$root/.venv/bin/python" -m gcp_storage_emulator -d "$work/gcs" start --host 127.0.0.1 \
    --port "$port" --default-bucket bgs-test >"$BEAM_GRAPH_TEST_LOGS/launch-gcs.log" 2>&1 &
  emulator=$!
  "$root/.venv/bin/python" -m tests.fake_dataflow --host 127.0.0.1 --port 80 --job_id "$job_id" \
    --record "$work/launch/job.json" >"$BEAM_GRAPH_TEST_LOGS/launch-dataflow.log" 2>&1 &
  dataflow=$!
  trap 'kill "$emulator" "$dataflow" 2>/dev/null || true' EXIT
  host_python - "$work/graph" <<'PY'
import glob, os, sys, time
from apache_beam.io.filesystems import FileSystems
from sampler.io import gcs
gcs.prepare()  # the emulator's anonymous access
deadline = time.time() + 60
for path in sorted(glob.glob(sys.argv[1] + "/*")):
    while True:
        try:
            with open(path, "rb") as src, FileSystems.create(
                "gs://bgs-test/graph/" + os.path.basename(path)
            ) as dst:
                dst.write(src.read())
            break
        except Exception:  # the emulator is still starting
            if time.time() > deadline:
                raise
            time.sleep(1)
PY
  if ! kill -0 "$dataflow" 2>/dev/null; then
    echo "the Dataflow stand-in could not listen on 127.0.0.1:80: $(tail -n 1 "$BEAM_GRAPH_TEST_LOGS/launch-dataflow.log")"
    return 1
  fi
  # `docker` for the launcher: podman, with this run's label and the emulator's address.
  cat >"$work/bin/docker" <<EOF
#!/usr/bin/env bash
set -euo pipefail
case "\$1" in
  pull) exec podman image exists "\$2" ;;
  run) shift; exec podman run --label "beam-graph-test=$BEAM_GRAPH_TEST_RUN" \\
    --env STORAGE_EMULATOR_HOST --env GCE_METADATA_HOST --env GCE_METADATA_IP \\
    --env NO_GCE_CHECK "\$@" ;;
  *) exec podman "\$@" ;;
esac
EOF
  chmod +x "$work/bin/docker"
  echo '{"type": "authorized_user", "client_id": "x", "client_secret": "x", "refresh_token": "x"}' \
    >"$work/launch/adc.json"
  out="$(
    cd "$work/launch" && PATH="$work/bin:$PATH" GOOGLE_APPLICATION_CREDENTIALS="$work/launch/adc.json" \
      bash "$root/scripts/launch_dataflow.sh" sample --project bgs-test --region europe-west4 \
      --bucket bgs-test --image "$image" --launcher docker --job_name bgs-test \
      --graph_schema gs://bgs-test/graph --sampling_spec gs://bgs-test/graph/sampling_spec.pbtxt \
      --output_samples gs://bgs-test/out/s@4 --dataflow_endpoint http://localhost --no_auth 2>&1
  )"
  echo "$out"
  if ! grep -q "^+ docker run .*$image python -m pipelines.sample " <<<"$out"; then
    echo "the launcher did not run the stage in the image"
    return 1
  fi
  if ! grep -q "^job id:  $job_id\$" <<<"$out"; then
    echo "the launcher printed no job id: the job was not submitted"
    return 1
  fi
  host_python - "$work/launch/job.json" "$image" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["job"]
images = {p["workerHarnessContainerImage"] for p in job["environment"]["workerPools"]}
assert images == {sys.argv[2]}, f"the job's workers would run {images}, not {sys.argv[2]}"
print(f"job request: {job['name']}, workers on {sys.argv[2]}")
PY
}

# ---------------------------------------------------------------------------------------------
# The driver.

debian_mirror() {
  # The mirror apt uses (deb822 sources or sources.list), else Debian's own.
  if [ -n "${BEAM_GRAPH_DEBIAN_MIRROR:-}" ]; then
    echo "$BEAM_GRAPH_DEBIAN_MIRROR"
    return
  fi
  local found
  found="$(
    {
      sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/\?[[:space:]]*$/\1/p' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null
      sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*\/debian\)\/\?[[:space:]].*/\1/p' \
        /etc/apt/sources.list 2>/dev/null
    } | head -n 1
  )"
  echo "${found:-http://deb.debian.org/debian}"
}

if [ "${1:-}" = __step ]; then
  # shellcheck source=scripts/env.sh
  source "$root/scripts/env.sh"
  cd "$root"
  "step_$2"
  exit 0
fi

skip() {
  echo "test_docker: skipped: $*" >&2
  exit 77
}

install_tools() {
  local tool missing=()
  for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  command -v apt-get >/dev/null 2>&1 || skip "${missing[*]} missing and no apt-get to install them"
  say "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 600 apt-get install -y --no-install-recommends podman runc debootstrap \
    >/dev/null 2>&1; then
    timeout 300 apt-get update >/dev/null 2>&1 || true
    timeout 600 apt-get install -y --no-install-recommends podman runc debootstrap \
      >/dev/null 2>&1 || skip "podman, runc and debootstrap cannot be installed with apt-get"
  fi
}

configure_podman() {
  # Private configuration, written before the store is first made (the overlay driver: with
  # the default, every `podman run` stalls 20 s at its exit). crun cannot set rlimits here:
  # runc. No netavark: the host's network. Ulimits: the host's own limits (podman's defaults
  # are higher, and a container may not raise them).
  local nofile nproc
  nofile="$(ulimit -Hn)"
  nproc="$(ulimit -Hu)"
  [ "$nofile" != unlimited ] || nofile=1048576
  # Processes: podman's default (1048576) is refused, and so is the shell's limit (96365 on
  # the machine this was written on, where 32768 was the most runc could set).
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then
    nproc=32768
  fi
  cat >"$CONTAINERS_STORAGE_CONF" <<EOF
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "$cache/run"
EOF
  cat >"$CONTAINERS_CONF" <<EOF
[containers]
netns = "host"
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$cache/tmp"
EOF
  cat >"$CONTAINERS_REGISTRIES_CONF" <<EOF
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
EOF
}

current=""
child=""
work=""
podman_ready=0
logs="$cache/logs"
run_id="bgs-$$"
export BEAM_GRAPH_TEST_RUN="$run_id" BEAM_GRAPH_TEST_LOGS="$logs"

cleanup() { # on every exit: the running step, this run's containers, the scratch folder
  local rc=$? ids
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  [ "$podman_ready" = 1 ] || exit "$rc"
  ids="$(podman ps -aq --filter "label=beam-graph-test=$run_id" 2>/dev/null || true)"
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086 # one id per word
    podman rm --force --time 0 $ids >/dev/null 2>&1 || true
  fi
  [ -z "$work" ] || rm -rf "$work"
  exit "$rc"
}

on_signal() { # NAME NUMBER
  trap - TERM INT
  echo "test_docker: FAILED at step ${current:-setup}: stopped by SIG$1" >&2
  exit $((128 + $2))
}

run_step() { # NAME LIMIT_S: step_NAME in its own process, bounded, logged
  local name="$1" limit="$2" start=$SECONDS status=0 took last
  current="$name"
  # (9>&-: the steps' processes do not hold the run's lock.)
  timeout --kill-after=20 "$limit" bash "$self" __step "$name" >"$logs/$name.log" 2>&1 9>&- &
  child=$!
  wait "$child" || status=$?
  child=""
  took=$((SECONDS - start))
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "test_docker: FAILED at step $name: timed out after ${limit} s (log: $logs/$name.log)" >&2
    exit 1
  elif [ "$status" != 0 ]; then
    last="$(grep -v '^[[:space:]]*$' "$logs/$name.log" | tail -n 1 | cut -c1-300)"
    echo "test_docker: FAILED at step $name (exit $status, ${took} s): $last (log: $logs/$name.log)" >&2
    exit 1
  fi
  say "$name ok (${took} s)"
}

main() {
  local build_only=0 arg
  for arg in "$@"; do
    case "$arg" in
      --build-only) build_only=1 ;;
      -h | --help)
        sed -n '2,/^set -euo/p' "$self" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
      *)
        echo "test_docker: unknown argument '$arg' (see --help)" >&2
        exit 2
        ;;
    esac
  done
  trap cleanup EXIT
  trap 'on_signal TERM 15' TERM
  trap 'on_signal INT 2' INT
  [ "${BEAM_GRAPH_DOCKER_TEST:-1}" != 0 ] || skip "BEAM_GRAPH_DOCKER_TEST=0"
  [ "$(id -u)" = 0 ] || skip "needs root (podman with its storage in $cache)"
  if [ ! -x "$root/.venv/bin/python" ]; then
    echo "test_docker: FAILED at step setup: no $root/.venv (run bash scripts/bootstrap.sh)" >&2
    exit 1
  fi
  install_tools
  mkdir -p "$logs"
  exec 9>"$cache/lock"
  if ! flock --timeout 1800 9; then
    echo "test_docker: FAILED at step lock: another run held $cache/lock for 30 min" >&2
    exit 1
  fi
  configure_podman
  podman_ready=1
  rm -f "$logs"/*.log

  run_step base 900
  run_step build 1800
  [ "$build_only" = 0 ] || exit 0
  work="$(mktemp -d /tmp/beam-graph-docker.XXXXXX)"
  chmod 0755 "$work"
  export BEAM_GRAPH_TEST_WORK="$work"
  run_step demo 600
  run_step graph 600
  run_step stages 600
  run_step kernels 300
  run_step portable 900
  run_step launch 600
  say "all checks passed ($SECONDS s)"
}

main "$@"
