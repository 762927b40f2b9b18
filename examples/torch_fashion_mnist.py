"""A PyTorch training loop that trains across sites with geoloco: a small
MLP on Fashion-MNIST, the loop a user would write, plus the wrapper.

    python3 examples/torch_fashion_mnist.py --socket /var/lib/geoloco/jobs/JOB/sync.sock --job JOB
    torchrun --nproc_per_node 2 examples/torch_fashion_mnist.py --socket ... --job JOB   # DDP inside the site

geoloco.torch.DiLoCo does the rest: the job's first anchor (this trainer's
initialization when the job is new), the phases the job file sets, SYNC and
RESULT at each phase's end, Streaming DiLoCo's fragments and merge. The
inner AdamW and its state are the loop's own and carry across rounds, as
DiLoCo's inner optimizer does. Under torchrun the model is wrapped in
DistributedDataParallel (gloo on the CPU): each rank trains on its part of
the site's data, rank 0 talks to the daemon and the others get each new
anchor by broadcast.

The socket and job also come from GEOLOCO_SOCKET and GEOLOCO_JOB (geolocod
sets them when it starts a trainer). Data: the Debian package
dataset-fashion-mnist (gzip'd IDX files under /usr/share/datasets/fashion-mnist),
read with gzip and numpy. Exits 77 when torch or numpy is missing (so ctest
skips the integration tests instead of failing them).
"""

import argparse
import gzip
import os
import sys
import time

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:
    print("torch and numpy are needed (%s): skipping" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import geoloco.torch  # noqa: E402


def read_idx(path):
    """An IDX file (gzip'd): magic 0x0000080D (ubyte, D dims), D big-endian u32 sizes, data."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError("%s is not an unsigned-byte IDX file" % path)
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise ValueError("%s holds %d bytes for shape %s" % (path, body.size, shape))
    return body.reshape(shape)


def load_split(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % prefix))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % prefix))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0))
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64))  # Fashion-MNIST mean and std


def evaluate(model, x, y):
    model = geoloco.torch.unwrap(model)  # rank 0 alone: not through DDP's forward, which may sync buffers
    with torch.no_grad():
        logits = model(x)
        return nn.functional.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=os.environ.get("GEOLOCO_SOCKET"), help="the job's Unix socket")
    ap.add_argument("--job", default=os.environ.get("GEOLOCO_JOB"), help="the job's name")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--hidden", type=int, default=128, help="hidden units of the MLP")
    ap.add_argument("--sync-every", type=int, default=None,
                    help="inner steps per round, only for a daemon that does not send the job's plan")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3, help="inner AdamW learning rate")
    ap.add_argument("--seed", type=int, default=0, help="model init and data order")
    ap.add_argument("--shard", type=int, default=int(os.environ.get("GEOLOCO_SITE_SHARD", "0")),
                    help="this site's shard of the training data (geolocod sets GEOLOCO_SITE_SHARD)")
    ap.add_argument("--shards", type=int, default=int(os.environ.get("GEOLOCO_SITE_SHARDS", "1")),
                    help="shards the training data is cut into (geolocod sets GEOLOCO_SITE_SHARDS)")
    ap.add_argument("--eval-samples", type=int, default=2000, help="test images for the eval loss/accuracy")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the daemon's answers")
    ap.add_argument("--state", help="keep the wrapper's state (inner AdamW, steps) here after every sync and resume "
                                    "from it after a restart ({shard} becomes the site's shard)")
    ap.add_argument("--save", help="write the final parameters here (numpy .npz, by parameter name; "
                                   "{shard} in the path becomes the site's shard)")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)  # the same initialization on every site
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    if world > 1:  # under torchrun: data parallelism inside the site
        torch.distributed.init_process_group("gloo")
        rank = torch.distributed.get_rank()
    x_train, y_train = load_split(args.data_dir, "train")
    # This site's shard of the data, and of it this rank's part.
    x_train, y_train = x_train[args.shard::args.shards], y_train[args.shard::args.shards]
    x_train, y_train = x_train[rank::world], y_train[rank::world]
    x_test, y_test = load_split(args.data_dir, "test")
    x_test, y_test = x_test[:args.eval_samples], y_test[:args.eval_samples]
    model = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    rng = torch.Generator().manual_seed(args.seed * 1000 + args.shard)
    say = print if rank == 0 else (lambda *a, **k: None)

    state = args.state.format(shard=args.shard) if args.state else None
    with geoloco.torch.DiLoCo(model, optimizer, socket=args.socket, job=args.job, timeout=args.timeout,
                              sync_every=args.sync_every, state_path=state) as diloco:
        loss, acc = evaluate(model, x_test, y_test)
        say("start: round %s, eval loss %.4f acc %.3f" % (diloco.next_round, loss, acc), flush=True)
        if diloco.resumed is not None:
            say("resumed from the saved state: round %d, step %d" % (diloco.resumed, diloco.steps), flush=True)
        skip = diloco.steps  # a resumed trainer's data goes on where it stopped (the same order, seeded)
        started, done = time.monotonic(), False
        while not done:
            order = torch.randperm(len(x_train), generator=rng)
            for at in range(0, len(order) - args.batch + 1, args.batch):
                if skip > 0:
                    skip -= 1
                    continue
                idx = order[at:at + args.batch]
                loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                rounds = diloco.rounds
                done = diloco.step(tokens=len(idx), loss=loss.item())
                if diloco.rounds != rounds and rank == 0:  # a round synced (streaming: merged τ steps later)
                    eval_loss, acc = evaluate(model, x_test, y_test)
                    say("round %d synced: eval loss %.4f, acc %.3f, %.1f s" % (diloco.next_round - 1, eval_loss, acc,
                                                                              time.monotonic() - started), flush=True)
                if done:
                    break
    if args.save:  # every rank: its replica (a rank's file gets ".rankN" before the suffix under torchrun)
        path = args.save.format(shard=args.shard)
        geoloco.torch.save_parameters(model, path if world == 1 else path.replace(".npz", ".rank%d.npz" % rank))
    if world > 1:
        geoloco.torch.leave_process_group()  # does not return
    return 0


if __name__ == "__main__":
    sys.exit(main())
