"""The controller: wiring read off the dataflow, spawners (local processes, Ray), supervision and restarts."""
