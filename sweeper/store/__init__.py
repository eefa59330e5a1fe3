"""Where results live: storage URLs (passwords never shown), a study through Optuna's public
API, heartbeats and orphaned trials, and reading trials (through sweeper.store.record.TrialRecord).
Used by the sweep and the report; never imports torch or the sweep."""
