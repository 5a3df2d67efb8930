"""Readers and writers of Unigraph tables (CSV, TFRecord of tf.Example, Parquet)."""
