"""The sweep: a thin front (sweep.py) over a frozen plan built from the config (plan.py), the
ask/tell loop with pure stop rules (loop.py, trials.py, launch.py), the search space (space.py),
the interleaved confirmation (confirm.py), progress lines and outputs. Never imports torch.

This __init__ imports nothing: the Hydra plugin's config (settings.py) loads at Hydra's start
without Optuna.
"""
