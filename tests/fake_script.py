"""A user's training script in miniature (no torch unless --torch-out): steps of `--batch`
samples every few ms, reported the way `mode` says, misbehaving the way `mode` says.

    python tests/fake_script.py MODE --batch N [--after STEPS] [--out FILE] [--value WORD] [--torch-out FILE]
"""

import argparse
import json
import os
import sys
import time

import sweeper


class Batch:
    """A batch as sweeper.track sees a tensor: by its leading dimension."""

    def __init__(self, n: int) -> None:
        self.shape = (n, 28 * 28)


def batches(n: int):
    while True:
        time.sleep(0.001)  # the loader's wait
        yield Batch(n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--after", type=int, default=50, help="misbehave after this many steps")
    parser.add_argument("--out", default=None, help="write argv and the SWEEPER_* environment here")
    parser.add_argument("--value", default=None)
    parser.add_argument("--torch-out", default=None, help="import torch; after 5 steps write its settings here")
    args = parser.parse_args()
    torch = __import__("torch") if args.torch_out else None
    if args.out:
        env = {k: v for k, v in os.environ.items() if k.startswith("SWEEPER_") or k.startswith("OMP_")}
        with open(args.out, "w") as f:
            json.dump({"argv": sys.argv, "env": env}, f)
    if args.mode == "silent":
        time.sleep(3600)
    if args.mode == "untracked":  # a loop that never tells sweeper of a step, and ends
        for _, _batch in zip(range(50), batches(args.batch)):
            time.sleep(0.003)
        return
    if args.mode == "old-sweeper":  # an earlier sweeper.track, which sent each step as a line of text
        fifo = os.open(os.environ["SWEEPER_STEPS"], os.O_WRONLY)
        for _ in batches(args.batch):
            time.sleep(0.003)
            os.write(fifo, f"0 {time.monotonic():.6f} 0.001000 {args.batch}\n".encode())
    steps = 0
    for batch in sweeper.track(batches(args.batch)) if args.mode not in ("lines", "step") else batches(args.batch):
        time.sleep(0.003)  # the step
        steps += 1
        if torch is not None and steps == 5:  # what sweeper.track set at the first step, as torch has it now
            with open(args.torch_out, "w") as f:
                json.dump(
                    {
                        "threads": torch.get_num_threads(),
                        "flushed": float(torch.tensor([1e-39]) * 1.0) == 0.0,  # a subnormal input read as zero
                        "cudnn_benchmark": torch.backends.cudnn.benchmark,
                    },
                    f,
                )
        if args.mode == "lines":
            print(f"sweeper: samples={args.batch} wait=0.001", flush=True)
        elif args.mode == "step":
            sweeper.step(args.batch)
        if steps == args.after:
            if args.mode == "crash":
                os.abort()
            if args.mode == "oom":
                print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
                sys.exit(1)
            if args.mode == "error":
                raise ValueError("the user's loop broke")
            if args.mode == "early":
                return
            if args.mode == "hang":
                time.sleep(3600)
            if args.mode == "garbage":
                print("sweeper: samples=lots", flush=True)


if __name__ == "__main__":
    main()
