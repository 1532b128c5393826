"""The pure core: spec, states, observations in, decisions out. No I/O, no clock, no threads."""
