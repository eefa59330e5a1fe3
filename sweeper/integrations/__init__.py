"""Callbacks that report the steps of a framework's own training loop to sweeper (task=script):
`sweeper.integrations.lightning.SweeperCallback` for Lightning's Trainer and
`sweeper.integrations.transformers.SweeperCallback` for the Hugging Face Trainer. Each imports its
framework; `import sweeper` imports neither. Outside a sweeper run they do nothing."""
