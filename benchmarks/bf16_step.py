"""Whether this CPU computes bf16 faster than fp32: the MNIST MLP's bare train step (forward,
loss, backward, Adam) at batch 1024 under autocast, without a loader, fp32 and bf16 alternated,
at 1 and 2 threads. It says what the machine probe's rule (sweeper.measuring.probe.
cpu_computes_bf16) decides from the CPU's instructions, which the recipes read.

    python benchmarks/bf16_step.py [BATCH] [STEPS]  -> ms per step, each precision twice per thread count
"""

from __future__ import annotations

import sys
import time

import torch

from sweeper.measuring.probe import cpu_computes_bf16
from sweeper.tasks.mnist_mlp import mlp


def ms_per_step(precision: str, batch: int, steps: int) -> float:
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    return 1000 * (time.perf_counter() - began) / steps


def main() -> None:
    batch, steps = (int(a) for a in (sys.argv[1:] + ["1024", "30"][len(sys.argv) - 1 :])[:2])
    capabilities = torch.cpu.get_capabilities()
    onednn = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    wanted = ("architecture", "avx512_f", "avx512_bf16", "amx_bf16")
    print(f"{capabilities.get('cpu_name')}: {', '.join(f'{k}={capabilities.get(k)}' for k in wanted)}")
    print(f"oneDNN's bf16 path: {onednn}; in hardware by the probe's rule: {cpu_computes_bf16(onednn, capabilities)}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for precision in ("fp32", "bf16", "fp32", "bf16"):
            print(f"{threads} thread(s), {precision}: {ms_per_step(precision, batch, steps):.1f} ms/step", flush=True)


if __name__ == "__main__":
    main()
