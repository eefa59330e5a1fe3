"""Another Hydra app that selects hydra/sweeper=throughput; its job measures itself."""

import hydra


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def job(cfg):
    # a made-up response surface: fastest at x=3, memory grows with x
    speed = 100.0 - (cfg.x - 3) ** 2 * 10 + (5.0 if cfg.mode == "fast" else 0.0)
    return {"samples_per_sec": speed, "peak_memory_mb": 10.0 * cfg.x}


if __name__ == "__main__":
    job()
