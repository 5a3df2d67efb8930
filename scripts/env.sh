# shellcheck shell=bash
# Sourced by the scripts: environment every run of this project needs.
# tensorflow_gnn refuses to import under Keras 3 unless this is set first.
export TF_USE_LEGACY_KERAS=1
# Keep TensorFlow's C++ start-up chatter out of the output.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
