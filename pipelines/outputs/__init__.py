"""A run's output folder: refused when it could replace or re-read an input (input_checks), held
by one run at a time (output_lock)."""
