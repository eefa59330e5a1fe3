"""The mnist_mlp train step as people write data-parallel training by hand: torchrun starts the
ranks, each wraps the model in DistributedDataParallel and reads its share through a
DistributedSampler; fixed step counts, timed between barriers; rank 0 prints the total.

    python -m torch.distributed.run --standalone --nproc_per_node=N \
        benchmarks/ddp_hand_loop.py BATCH WORKERS SECONDS   -> prints total samples/sec
"""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from sweeper.tasks.mnist_mlp import MNIST_TRANSFORM, generated_mnist, mlp

batch, workers, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(mlp())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # as benchmarks/hand_loop.py
dataset = generated_mnist(60000, MNIST_TRANSFORM)
sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, drop_last=True)
data = DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers, drop_last=True)


def batches():
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from data
        epoch += 1


def train(steps: int) -> None:
    for _ in range(steps):
        x, y = next(stream)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


stream = batches()
train(50)  # warm-up
dist.barrier()
began = time.perf_counter()
train(50)
rate = torch.tensor([50 / (time.perf_counter() - began)])
dist.all_reduce(rate, op=dist.ReduceOp.MIN)  # the same step count on every rank
steps = max(1, int(rate.item() * seconds))
dist.barrier()
began = time.perf_counter()
train(steps)
dist.barrier()
elapsed = time.perf_counter() - began
if rank == 0:
    print(steps * batch * world / elapsed)
dist.destroy_process_group()
