"""The measuring child: the only package that imports torch. It builds the workload, applies
the backend settings, times the loop and reports the result over the wire (sweeper.protocol).

Nothing here imports sweeper.search, sweeper.runner or sweeper.store; this __init__ imports
nothing, so `sweeper.measuring.workload` (the public Workload type) stays light.
"""
