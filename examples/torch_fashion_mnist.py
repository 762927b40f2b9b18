"""A PyTorch inner trainer for geoloco: a small MLP on Fashion-MNIST that
trains through the site daemon with the pure-Python sync client.

Each round: load the anchor from shared memory into the model, run
--steps inner AdamW steps (the optimizer state stays across rounds, as
DiLoCo's inner optimizer does), copy the replica into shared memory, SYNC,
wait for RESULT, repeat until the daemon says stop. If the daemon has no
anchor yet (a fresh job), this trainer's initialization becomes it.

    python3 examples/torch_fashion_mnist.py --socket /var/lib/geoloco/jobs/JOB/sync.sock --job JOB

The job's sync socket is <data_dir>/jobs/<job>/sync.sock (data_dir from the
site file; /var/lib/geoloco with the packaged service); a user in the
geoloco group may attach. The socket and job also come from GEOLOCO_SOCKET
and GEOLOCO_JOB (the daemon sets them when it starts a trainer). Data: the Debian package
dataset-fashion-mnist (gzip'd IDX files under /usr/share/datasets/fashion-mnist),
read with gzip and numpy. Exits 77 when torch or numpy is missing (so ctest
skips the integration test instead of failing it).
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
from geoloco.sync_client import SyncClient, layout_of  # noqa: E402


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


def model_to_segment(model, client, fragment=None):
    """Copies parameters into the segment (all, or one fragment's tensors);
    torch.from_numpy views the shared memory, so this is one copy."""
    names = None if fragment is None else set(client.fragment_tensors(fragment))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if names is None or name in names:
                torch.from_numpy(client.tensor(name)).copy_(p.detach())


def segment_to_model(client, model, fragment=None):
    names = None if fragment is None else set(client.fragment_tensors(fragment))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if names is None or name in names:
                p.copy_(torch.from_numpy(client.tensor(name)))


def evaluate(model, x, y):
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
    return loss, acc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=os.environ.get("GEOLOCO_SOCKET"), help="the job's Unix socket")
    ap.add_argument("--job", default=os.environ.get("GEOLOCO_JOB"), help="the job's name")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--hidden", type=int, default=128, help="hidden units of the MLP")
    ap.add_argument("--steps", type=int, default=100, help="inner steps per round (H)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3, help="inner AdamW learning rate")
    ap.add_argument("--seed", type=int, default=0, help="model init and data order")
    ap.add_argument("--eval-samples", type=int, default=2000, help="test images for the eval loss/accuracy")
    ap.add_argument("--max-rounds", type=int, default=1000000, help="stop after this many rounds even without stop")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the daemon's answers")
    ap.add_argument("--check-outer-eta", type=float, default=None,
                    help="test hook: assert each new anchor equals anchor - eta*(anchor - replica) in fp32")
    args = ap.parse_args(argv)
    if not args.socket or not args.job:
        ap.error("--socket and --job (or GEOLOCO_SOCKET and GEOLOCO_JOB) are required")

    torch.manual_seed(args.seed)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "test")
    x_test, y_test = x_test[:args.eval_samples], y_test[:args.eval_samples]
    model = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    rng = torch.Generator().manual_seed(args.seed)

    layout = layout_of([(name, tuple(p.shape)) for name, p in model.named_parameters()])
    with SyncClient.connect(args.socket, args.job, layout, welcome_timeout=args.timeout) as client:
        if not client.anchor_ready:
            model_to_segment(model, client)
            client.send_initial(args.timeout)
        segment_to_model(client, model)
        loss, acc = evaluate(model, x_test, y_test)
        print("start: %d parameters in %d fragment(s), round %d, eval loss %.4f acc %.3f"
              % (client.params.size, len(client.fragments), client.next_round(0), loss, acc), flush=True)

        order = torch.randperm(len(x_train), generator=rng)
        cursor = 0
        for _ in range(args.max_rounds):
            started = time.monotonic()
            total, seen = 0.0, 0
            for _ in range(args.steps):
                if cursor + args.batch > len(order):
                    order, cursor = torch.randperm(len(x_train), generator=rng), 0
                idx = order[cursor:cursor + args.batch]
                cursor += args.batch
                loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item() * len(idx)
                seen += len(idx)
            round_ = client.next_round(0)
            anchor_before = client.params.copy() if args.check_outer_eta is not None else None
            # Every fragment goes out at the end of the round (no streaming
            # overlap here). The replica is copied for the check before any
            # SYNC: from then on the daemon may overwrite it with the anchor.
            model_to_segment(model, client)
            replica = client.params.copy() if args.check_outer_eta is not None else None
            for f in range(len(client.fragments)):
                client.sync(client.next_round(f), f, tokens=seen, loss=total / seen)
            stop = False
            for f in range(len(client.fragments)):
                result = client.wait_result(args.timeout)
                assert result.round == round_, (result, round_)
                segment_to_model(client, model, result.fragment)
                stop = stop or result.stop
            if args.check_outer_eta is not None:
                eta = np.float32(args.check_outer_eta)
                expected = anchor_before - eta * (anchor_before - replica)
                np.testing.assert_array_equal(client.params, expected)
                assert not np.array_equal(client.params, anchor_before), "the anchor did not move"
            eval_loss, acc = evaluate(model, x_test, y_test)
            print("round %d: train loss %.4f, eval loss %.4f, acc %.3f, %.2f s"
                  % (round_, total / seen, eval_loss, acc, time.monotonic() - started), flush=True)
            if stop:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
