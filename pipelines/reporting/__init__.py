"""What a run reports: its accounting (outputs, dead letters, run_summary.json), the resources it
used, and its progress while it runs."""
