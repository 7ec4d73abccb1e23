"""An experiment's description and record: config, dataflow, run folder, checkpoints, metrics."""
