"""The arrows of the dataflow: wire format, observation/carry wire names, admission guards, CURVE, and the parameter stream."""
