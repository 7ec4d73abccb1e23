"""The controller: wiring read off the dataflow, spawners (local processes, Ray, serial
threads), supervision and restarts (see ``docs/architecture.md``, "Controller")."""
