#!/usr/bin/env bash
# Runs a stage of this project on Google Cloud Dataflow: builds and pushes the worker image,
# then submits the job from that same image (or from the local .venv) and prints its id and
# console URL. docs/dataflow.md walks through it; `--dry-run` prints every command instead.
#
#   scripts/launch_dataflow.sh sample --project P --region R --bucket B --repository REPO \
#       --graph_schema gs://B/graph --sampling_spec gs://B/spec.pbtxt \
#       --output_samples gs://B/samples/samples@64
#
# Every flag of this script can also come from the environment variable named in `--help`;
# flags win. All other flags go to the stage unchanged.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<'EOF'
usage: scripts/launch_dataflow.sh {sample|partition} [settings] [stage flags] [--dry-run]

settings (flag, or environment variable):
  --project P            GCP_PROJECT (or GOOGLE_CLOUD_PROJECT)  GCP project      [required]
  --region R             GCP_REGION             Dataflow and Artifact Registry region [required]
  --bucket B             GCS_BUCKET             bucket for gs://B/tmp and gs://B/staging [required]
  --repository REPO      AR_REPOSITORY          Artifact Registry Docker repository [required
                                                unless --image is given]
  --image_tag TAG        IMAGE_TAG              default: the git commit, else a timestamp
  --image_name NAME      IMAGE_NAME             default: graph-sampler
  --image URI            IMAGE                  use this pushed image; nothing is built
  --skip_build           SKIP_BUILD=1           reuse the image at the tag, do not build
  --builder B            IMAGE_BUILDER          gcloud (Cloud Build, default) or docker
  --runtime_user U       RUNTIME_USER           image user (default beam; see docs/dataflow.md)
  --launcher L           LAUNCHER               docker (default: submit from the image) or
                                                local (submit from .venv)
  --max_workers N        MAX_WORKERS            default 10
  --machine_type T       MACHINE_TYPE           default n2-highmem-4
  --network NET          NETWORK
  --subnetwork SUB       SUBNETWORK             e.g. regions/R/subnetworks/SUB
  --no_use_public_ips    NO_USE_PUBLIC_IPS=1    workers get internal IPs only
  --service_account SA   SERVICE_ACCOUNT        worker service account e-mail
  --job_name NAME        JOB_NAME               default graph-STAGE-<UTC time>
  --dry-run                                     print the commands, run nothing

credentials: the docker launcher mounts $GOOGLE_APPLICATION_CREDENTIALS (default: the gcloud
application-default credentials file) read-only; the script never prints it.
EOF
}

die() {
  echo "error: $*" >&2
  exit 2
}

# --- the stages: module, input flag, output flag ---
stage="${1:-}"
case "$stage" in
  sample)
    module=pipelines.sample
    input_flag=--graph_schema
    output_flag=--output_samples
    ;;
  partition)
    module=pipelines.partition
    input_flag=--graph_schema
    output_flag=--output_dir
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  "" | -*) die "missing stage: the first argument must be 'sample' or 'partition' (see --help)" ;;
  *) die "unknown stage '$stage': the first argument must be 'sample' or 'partition'" ;;
esac
shift

# --- settings: environment first, then flags ---
project="${GCP_PROJECT:-${GOOGLE_CLOUD_PROJECT:-}}"
region="${GCP_REGION:-}"
bucket="${GCS_BUCKET:-}"
repository="${AR_REPOSITORY:-}"
image_tag="${IMAGE_TAG:-}"
image_name="${IMAGE_NAME:-graph-sampler}"
image="${IMAGE:-}"
skip_build="${SKIP_BUILD:-0}"
builder="${IMAGE_BUILDER:-gcloud}"
runtime_user="${RUNTIME_USER:-beam}"
launcher="${LAUNCHER:-docker}"
max_workers="${MAX_WORKERS:-10}"
machine_type="${MACHINE_TYPE:-n2-highmem-4}"
network="${NETWORK:-}"
subnetwork="${SUBNETWORK:-}"
no_public_ips="${NO_USE_PUBLIC_IPS:-0}"
service_account="${SERVICE_ACCOUNT:-}"
job_name="${JOB_NAME:-}"
dry_run=0
stage_args=()

# Flags take `--name value` or `--name=value`.
take_value() { # name, "$@" -> sets $value and $consumed
  local name="$1" arg="$2"
  if [[ "$arg" == "$name="* ]]; then
    value="${arg#*=}"
    consumed=1
  else
    [ "$#" -ge 3 ] && [[ "$3" != --* ]] || die "$name needs a value"
    value="$3"
    consumed=2
  fi
}

while [ "$#" -gt 0 ]; do
  arg="$1"
  name="${arg%%=*}"
  case "$name" in
    --project | --region | --bucket | --repository | --image_tag | --image_name | --image | \
      --builder | --runtime_user | --launcher | --max_workers | --machine_type | --network | \
      --subnetwork | --service_account | --job_name)
      take_value "$name" "$@"
      case "$name" in
        --project) project="$value" ;;
        --region) region="$value" ;;
        --bucket) bucket="$value" ;;
        --repository) repository="$value" ;;
        --image_tag) image_tag="$value" ;;
        --image_name) image_name="$value" ;;
        --image) image="$value" ;;
        --builder) builder="$value" ;;
        --runtime_user) runtime_user="$value" ;;
        --launcher) launcher="$value" ;;
        --max_workers) max_workers="$value" ;;
        --machine_type) machine_type="$value" ;;
        --network) network="$value" ;;
        --subnetwork) subnetwork="$value" ;;
        --service_account) service_account="$value" ;;
        --job_name) job_name="$value" ;;
      esac
      shift "$consumed"
      ;;
    --no_use_public_ips)
      no_public_ips=1
      shift
      ;;
    --skip_build)
      skip_build=1
      shift
      ;;
    --dry-run | --dry_run)
      dry_run=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    --runner | --sdk_container_image | --temp_location | --staging_location)
      die "$name is set by this script; drop it from the command line"
      ;;
    *)
      stage_args+=("$arg")
      shift
      ;;
  esac
done

# --- checks: each failure is one line naming the flag or variable ---
[ -n "$project" ] || die "missing project: pass --project or set GCP_PROJECT"
[ -n "$region" ] || die "missing region: pass --region or set GCP_REGION"
[ -n "$bucket" ] || die "missing bucket: pass --bucket or set GCS_BUCKET"
bucket="${bucket#gs://}"
bucket="${bucket%/}"
[[ "$bucket" =~ ^[a-z0-9][-a-z0-9_.]*[a-z0-9]$ ]] || die "--bucket '$bucket' is not a GCS bucket name"
[[ "$max_workers" =~ ^[1-9][0-9]*$ ]] || die "--max_workers (MAX_WORKERS) must be a positive integer, got '$max_workers'"
case "$builder" in gcloud | docker) ;; *) die "--builder (IMAGE_BUILDER) must be gcloud or docker, got '$builder'" ;; esac
case "$launcher" in docker | local) ;; *) die "--launcher (LAUNCHER) must be docker or local, got '$launcher'" ;; esac
case "$no_public_ips" in 1 | true | yes) no_public_ips=1 ;; 0 | false | no | "") no_public_ips=0 ;; *)
  die "NO_USE_PUBLIC_IPS must be 1 or 0, got '$no_public_ips'" ;;
esac
case "$skip_build" in 1 | true | yes) skip_build=1 ;; *) skip_build=0 ;; esac

if [ -z "$image" ]; then
  [ -n "$repository" ] || die "missing repository: pass --repository or set AR_REPOSITORY (or give --image)"
  if [ -z "$image_tag" ]; then
    image_tag="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || true)"
    [ -n "$image_tag" ] || image_tag="$(date -u +%Y%m%d-%H%M%S)"
  fi
  [[ "$image_tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--image_tag '$image_tag' is not a Docker tag"
  image="${region}-docker.pkg.dev/${project}/${repository}/${image_name}:${image_tag}"
  build=$((1 - skip_build))
else
  build=0
fi

[ -n "$job_name" ] || job_name="graph-${stage}-$(date -u +%Y%m%d-%H%M%S)"
[[ "$job_name" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || die "--job_name '$job_name' must be lowercase letters, digits and '-', starting with a letter"

flag_value() { # the value of stage flag $1, or empty
  local want="$1" i
  for ((i = 0; i < ${#stage_args[@]}; i++)); do
    case "${stage_args[$i]}" in
      "$want="*)
        echo "${stage_args[$i]#*=}"
        return
        ;;
      "$want")
        echo "${stage_args[$((i + 1))]:-}"
        return
        ;;
    esac
  done
}

input="$(flag_value "$input_flag")"
output="$(flag_value "$output_flag")"
[ -n "$input" ] || die "missing $input_flag: the $stage stage needs it"
[ -n "$output" ] || die "missing $output_flag: the $stage stage needs it"
[[ "$input" == gs://* ]] || die "$input_flag must be a gs:// path (Dataflow workers read it), got '$input'"
[[ "$output" == gs://* ]] || die "$output_flag must be a gs:// path (Dataflow workers write it), got '$output'"

# Whether the output would replace or re-read an input is the stage's own check (it lists the
# files; pipelines/outputs/input_checks.py): an output folder beside or inside the input's is fine.

# --- commands ---
credentials="${GOOGLE_APPLICATION_CREDENTIALS:-${HOME:-/nonexistent}/.config/gcloud/application_default_credentials.json}"
secret_names='(token|secret|password|passwd|credential|api_?key|private_?key|gbek)'

# Prints a command shell-quoted, one line, with secret values replaced by ***.
show() {
  local out=() arg hide_next=0 name
  for arg in "$@"; do
    if [ "$hide_next" = 1 ]; then
      hide_next=0
      if [[ "$arg" != -* ]]; then
        out+=("***")
        continue
      fi
    fi
    arg="${arg//"$credentials"/<credentials>}"
    name="${arg%%=*}"
    shopt -s nocasematch
    if [[ "$arg" == --* && "$name" =~ $secret_names ]]; then
      if [[ "$arg" == *=* ]]; then
        arg="$name=***"
      else
        hide_next=1
      fi
    fi
    shopt -u nocasematch
    out+=("$arg")
  done
  printf '+'
  printf ' %q' "${out[@]}"
  printf '\n'
}

run() {
  show "$@"
  [ "$dry_run" = 1 ] || "$@"
}

need() {
  [ "$dry_run" = 1 ] || command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH (needed for $2)"
}

pipeline_args=(
  --runner DataflowRunner
  --project "$project"
  --region "$region"
  --temp_location "gs://$bucket/tmp"
  --staging_location "gs://$bucket/staging"
  --sdk_container_image "$image"
  --experiments=use_runner_v2
  --job_name "$job_name"
  --max_num_workers "$max_workers"
  --machine_type "$machine_type"
)
[ -z "$network" ] || pipeline_args+=(--network "$network")
[ -z "$subnetwork" ] || pipeline_args+=(--subnetwork "$subnetwork")
[ "$no_public_ips" = 0 ] || pipeline_args+=(--no_use_public_ips)
[ -z "$service_account" ] || pipeline_args+=(--service_account_email "$service_account")

if [ "$launcher" = docker ]; then
  need docker "--launcher docker"
  if [ "$dry_run" = 0 ] && [ ! -r "$credentials" ]; then
    die "no readable credentials file: set GOOGLE_APPLICATION_CREDENTIALS or run 'gcloud auth application-default login'"
  fi
  # The host user runs the container so that it can read the (0600) credentials file; the
  # current directory is mounted read-only at /work so that relative local paths (a local
  # --sampling_spec, say) resolve as they do here.
  submit=(
    docker run --rm --user "$(id -u):$(id -g)" --env HOME=/tmp
    --volume "$credentials:/tmp/keys/credentials.json:ro"
    --env GOOGLE_APPLICATION_CREDENTIALS=/tmp/keys/credentials.json
    --env "GOOGLE_CLOUD_PROJECT=$project"
    --volume "$PWD:/work:ro" --workdir /work
    "$image" python -m "$module"
  )
else
  python="$root/.venv/bin/python"
  [ -x "$python" ] || python=python3
  submit=(env TF_USE_LEGACY_KERAS=1 "$python" -m "$module")
fi
submit+=("${stage_args[@]}" "${pipeline_args[@]}")

if [ "$build" = 1 ]; then
  if [ "$builder" = gcloud ]; then
    need gcloud "--builder gcloud"
    run gcloud builds submit "$root" --project "$project" \
      --config "$root/docker/cloudbuild.yaml" \
      --substitutions "_IMAGE=$image,_RUNTIME_USER=$runtime_user"
  else
    need docker "--builder docker"
    need gcloud "docker push to Artifact Registry"
    run gcloud auth configure-docker "${region}-docker.pkg.dev" --quiet
    run docker build --file "$root/docker/Dockerfile" --tag "$image" \
      --build-arg "RUNTIME_USER=$runtime_user" "$root"
    run docker push "$image"
  fi
fi
if [ "$launcher" = docker ] && { [ "$build" = 0 ] || [ "$builder" = gcloud ]; }; then
  # The image was not built by the local docker: fetch it to launch from it.
  run docker pull "$image"
fi

if [ "$dry_run" = 1 ]; then
  show "${submit[@]}"
  echo "dry run: nothing was built or submitted; job $job_name would run in $project/$region"
  exit 0
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
show "${submit[@]}"
status=0
"${submit[@]}" | tee "$log" || status=$?
job_id="$(sed -n 's/^dataflow job: //p' "$log" | head -n 1)"
if [ -n "$job_id" ]; then
  echo "job id:  $job_id"
  echo "console: https://console.cloud.google.com/dataflow/jobs/${region}/${job_id}?project=${project}"
else
  echo "console: https://console.cloud.google.com/dataflow/jobs?project=${project} (job $job_name)"
fi
exit "$status"
