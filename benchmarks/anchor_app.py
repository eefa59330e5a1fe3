"""The anchor's objective: mnist_mlp train measured in-process (no isolation), as a user of
hydra-optuna-sweeper writes it. Appends (time, params, samples/sec) to cfg.log per trial."""

import json
import time

import hydra
import torch
from torch.utils.data import DataLoader

from sweeper.tasks.mnist_mlp import MNIST_TRANSFORM, generated_mnist, mlp


@hydra.main(config_path="anchor_conf", config_name="config", version_base="1.3")
def objective(cfg) -> float:
    torch.set_num_threads(cfg.threads)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the published experiment
    data = DataLoader(
        generated_mnist(60000, MNIST_TRANSFORM),
        batch_size=cfg.batch_size,
        shuffle=True,
        num_workers=cfg.num_workers,
        drop_last=True,
    )
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None

    def batches():
        while True:
            yield from data

    stream = batches()

    def step():
        x, y = next(stream)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return x.shape[0]

    end = time.perf_counter() + cfg.warmup_s
    while time.perf_counter() < end:
        step()
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < cfg.measure_s:
        samples += step()
    value = samples / (time.perf_counter() - start)
    stream.close()  # ends the generator, and with it the loader's workers
    with open(cfg.log, "a") as f:
        f.write(
            json.dumps(
                {
                    "t": time.time(),
                    "batch_size": cfg.batch_size,
                    "num_workers": cfg.num_workers,
                    "threads": cfg.threads,
                    "precision": cfg.precision,
                    "value": value,
                }
            )
            + "\n"
        )
    return value


if __name__ == "__main__":
    objective()
