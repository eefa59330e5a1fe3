"""A stand-in for sweeper.measuring.worker: behaves as the spec's "mode" says, in milliseconds."""

import json
import os
import sys
import time

spec = json.load(sys.stdin)
fd = int(os.environ["SWEEPER_EVENT_FD"])
out = os.fdopen(fd, "w", buffering=1)
mode = spec["mode"]


def send(**event):
    out.write(json.dumps(event) + "\n")
    out.flush()


if mode == "ok":
    send(event="phase", phase="measure")
    send(event="window", index=0, rate=10.0)
    send(
        event="result",
        format=2,
        status="ok",
        throughput={"samples_per_sec": 10.0},
        machine={"threads": int(os.environ.get("OMP_NUM_THREADS") or 0)},
    )
elif mode == "scratch":  # leaves a file in the run's scratch directory, says where, and is killed
    scratch = os.environ.get("SWEEPER_SCRATCH", "")
    if scratch:
        with open(os.path.join(scratch, "left-behind"), "w") as f:
            f.write("x")
    send(event="phase", phase=scratch or "no scratch")
    time.sleep(60)
elif mode == "hang_with_children":
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            while True:
                time.sleep(1)
        pids.append(pid)
    with open(spec["pid_file"], "w") as f:
        json.dump(pids + [os.getpid()], f)
    send(event="phase", phase="window 1")
    while True:
        time.sleep(1)
elif mode == "windows_then_hang":
    for i, rate in enumerate((100.0, 120.0, 110.0)):
        send(event="window", phase=f"window {i + 1}", index=i, rate=rate)
    send(event="phase", phase="window 4")
    while True:
        time.sleep(1)
elif mode == "abort":
    os.abort()
elif mode == "oom_message":
    print("RuntimeError: DefaultCPUAllocator: can't allocate memory", file=sys.stderr)
    sys.exit(1)
elif mode == "exit_error":
    print("something broke badly", file=sys.stderr)
    sys.exit(3)
elif mode == "result_then_linger":
    if os.fork() == 0:  # a child holding the event fd, like a DataLoader worker
        time.sleep(60)
        os._exit(0)
    send(event="result", format=2, status="ok", throughput={"samples_per_sec": 1.0})
    os._exit(0)
elif mode == "oom_result_then_linger":
    send(event="result", format=2, status="oom", reason="RuntimeError: CUDA out of memory")
    time.sleep(60)
elif mode == "escape":
    pid = os.fork()
    if pid == 0:
        os.setsid()  # leaves the run's session and process group
        with open(spec["pid_file"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    while True:
        time.sleep(1)
elif mode == "abort_with_fd_holder":
    if os.fork() == 0:  # a descendant that keeps the event pipe open
        time.sleep(60)
        os._exit(0)
    time.sleep(0.2)
    os.abort()
elif mode == "sigkill_self":
    os.kill(os.getpid(), 9)
