"""The population-manager worker of a ``--population`` run: fitness from the members'
training episodes (``fitness``), PBT rounds sent to the learners (``manager``), and its
files in the run folder (``store``)."""
