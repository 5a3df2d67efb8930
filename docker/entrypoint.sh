#!/bin/sh
# Entry point of the graph sampler image: one image, two roles.
#
# - Beam worker: Dataflow (Runner v2) and Beam's portable runners start the SDK container
#   with the boot flags only (--id=... --provision_endpoint=... ...). Those go, unchanged,
#   to the Beam SDK's boot program, the base image's own ENTRYPOINT, which must run last.
# - Launch environment: anything else is a command, run as given, for example
#     docker run IMAGE python -m pipelines.sample --graph_schema gs://... --runner DataflowRunner ...
#     docker run IMAGE graph_sampler --help
set -eu
BEAM_BOOT=/opt/apache/beam/boot
case "${1:-}" in
  "" | -*) exec "$BEAM_BOOT" "$@" ;;
  *) exec "$@" ;;
esac
