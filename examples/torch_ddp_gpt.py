"""A byte-level GPT trained across sites with geoloco, each site a torchrun
group doing data parallelism (DDP) inside it: the loop a PyTorch user
already has, plus geoloco.torch.

    torchrun --nproc_per_node 2 --master_port 29501 examples/torch_ddp_gpt.py \
        --socket /var/lib/geoloco/jobs/JOB/sync.sock --job JOB
    python3 examples/torch_ddp_gpt.py ...          # one process

Every rank trains on random windows of its site's shard of the text (the
King James Bible from the Debian package bible-kjv by default, or --text
FILE); the last 10% of the text is held out. Rank 0 talks to the site's
daemon; the other ranks get each new anchor by broadcast. The backend is
gloo on CPUs and NCCL with --device cuda (one GPU per rank, LOCAL_RANK).

With --state the wrapper keeps the inner AdamW and the step count at every
sync; a restarted group (geolocod restarts a `trainer: {kind: command}`
trainer) resumes there, and so does its data: the windows of step s are a
function of (seed, shard, rank, s). On Debian 12, torchrun needs
`--redirects 1 --tee 1` (it cannot parse its own default); give each group
on one machine its own --master_port. Exits 77 when torch or numpy is
missing.
"""

import argparse
import math
import os
import subprocess
import sys
import time

try:
    import numpy  # noqa: F401  (geoloco.torch needs it)
    import torch
    from torch import nn
except ImportError as e:
    print("torch and numpy are needed (%s): skipping" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import geoloco.torch  # noqa: E402


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers, width, heads, context):
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[:tokens.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def read_text(path):
    if path:
        with open(path, "rb") as f:
            return f.read()
    try:
        return subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("cannot run `bible` (%s): install the Debian package bible-kjv, or pass --text FILE" % e)


def windows(data, starts, context):
    idx = starts[:, None] + torch.arange(context + 1)[None, :]
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


def evaluate(model, heldout, context, count, device):
    """Mean loss over the first `count` non-overlapping windows of the held-out text."""
    model = geoloco.torch.unwrap(model)  # rank 0 alone: not through DDP's forward, which may sync buffers
    starts = torch.arange(0, min(count, (len(heldout) - 1) // context) * context, context)
    x, y = windows(heldout, starts, context)
    with torch.no_grad():
        logits = model(x.to(device))
        return nn.functional.cross_entropy(logits.reshape(-1, 256), y.to(device).reshape(-1)).item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=os.environ.get("GEOLOCO_SOCKET"), help="the job's Unix socket")
    ap.add_argument("--job", default=os.environ.get("GEOLOCO_JOB"), help="the job's name")
    ap.add_argument("--text", help="a text file to train on (default: the King James Bible, package bible-kjv)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16, help="windows per step and rank")
    ap.add_argument("--lr", type=float, default=3e-3, help="inner AdamW peak learning rate")
    ap.add_argument("--warmup", type=int, default=50, help="inner steps of linear warm-up")
    ap.add_argument("--seed", type=int, default=1, help="model init (the same on every site) and data order")
    ap.add_argument("--shard", type=int, default=int(os.environ.get("GEOLOCO_SITE_SHARD", "0")),
                    help="this site's shard of the text (geolocod sets GEOLOCO_SITE_SHARD)")
    ap.add_argument("--shards", type=int, default=int(os.environ.get("GEOLOCO_SITE_SHARDS", "1")),
                    help="shards the text is cut into (geolocod sets GEOLOCO_SITE_SHARDS)")
    ap.add_argument("--eval-windows", type=int, default=256, help="held-out windows for the eval loss")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per rank, NCCL between ranks)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the daemon's answers")
    ap.add_argument("--state", help="keep the wrapper's state here and resume from it ({shard}: the site's shard)")
    ap.add_argument("--save", help="write the final parameters here (.npz by parameter name; {shard}: the site's "
                                   "shard; under torchrun each rank adds .rankN before the suffix)")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)  # the same initialization on every site and rank
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    device = torch.device(args.device)
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        rank = torch.distributed.get_rank()

    text = torch.frombuffer(bytearray(read_text(args.text)), dtype=torch.uint8).long()
    cut = len(text) - len(text) // 10
    train, heldout = text[:cut], text[cut:]
    per_site = len(train) // args.shards
    shard = train[args.shard * per_site:(args.shard + 1) * per_site]

    model = GPT(args.layers, args.width, args.heads, args.context).to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                                          else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    say = print if rank == 0 else (lambda *a, **k: None)
    state = args.state.format(shard=args.shard) if args.state else None

    with geoloco.torch.DiLoCo(model, optimizer, socket=args.socket, job=args.job, timeout=args.timeout,
                              state_path=state) as diloco:
        say("start: round %s, %d parameters, eval loss %.4f" % (
            diloco.next_round, sum(p.numel() for p in model.parameters()),
            evaluate(model, heldout, args.context, args.eval_windows, device)), flush=True)
        if diloco.resumed is not None:
            say("resumed from the saved state: round %d, step %d" % (diloco.resumed, diloco.steps), flush=True)
        started, done = time.monotonic(), False
        while not done:
            step = diloco.steps
            for group in optimizer.param_groups:  # linear warm-up, then the peak rate
                group["lr"] = args.lr * min(1.0, (step + 1) / max(args.warmup, 1))
            # The windows of step s on this rank: the same after a restart.
            g = torch.Generator().manual_seed(((args.seed * 1000 + args.shard) * 1000 + rank) * 10**9 + step)
            starts = torch.randint(0, len(shard) - args.context - 1, (args.batch,), generator=g)
            x, y = windows(shard, starts, args.context)
            logits = model(x.to(device))
            loss = nn.functional.cross_entropy(logits.reshape(-1, 256), y.to(device).reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            rounds = diloco.rounds
            done = diloco.step(tokens=x.numel(), loss=loss.item())
            if diloco.rounds != rounds and rank == 0:
                say("round %d synced: eval loss %.4f, %.1f s" % (
                    diloco.next_round - 1, evaluate(model, heldout, args.context, args.eval_windows, device),
                    time.monotonic() - started), flush=True)
    if args.save:  # every rank: its replica (a rank's file gets ".rankN" before the suffix under torchrun)
        path = args.save.format(shard=args.shard)
        geoloco.torch.save_parameters(model, path if world == 1 else path.replace(".npz", ".rank%d.npz" % rank))
    if world > 1:
        geoloco.torch.leave_process_group()  # does not return
    return 0


if __name__ == "__main__":
    sys.exit(main())
