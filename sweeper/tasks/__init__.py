"""Benchmark workloads. Each module has build(task_cfg) -> sweeper.workload.Workload."""
