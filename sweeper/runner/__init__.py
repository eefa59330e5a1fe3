"""One isolated run, seen from the parent: spawn the measuring child in its own process
group, time it out, classify how it ended, hold the machine's lock, stop on signals.
Never imports torch (the child, sweeper.measuring, does)."""
