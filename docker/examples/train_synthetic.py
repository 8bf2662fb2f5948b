"""Example Horovod + PyTorch training on generated data (the image's default program).

A small MLP learns a fixed random linear map with noise: no download, deterministic per seed.
Shows what a real script needs: DistributedSampler sharding, LR scaled by hvd.size(), broadcast
of parameters and optimizer state, optional fp16 compression, AMP and torch.compile
(--compile true: the Horovod + torch.compile example), logs and checkpoints on rank 0 only, a
checkpoint every epoch in SM_CHECKPOINT_DIR (/opt/ml/checkpoints) and resume from it at start,
the final model in SM_MODEL_DIR.

With --data-channel NAME it trains from a SageMaker channel instead (Pipe, File or FastFile
mode, through byoc.data.ChannelDataset): records of features+1 little-endian float32 (x, then
y), as --write-shards DIR writes them. Ranks may then get different numbers of batches;
hvd.join() at the end of each epoch lets the others finish their allreduces.

What it shares with train_ddp.py (options, data, model, checkpoints, printed lines) is in
synthetic_task.py beside it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import horovod.torch as hvd
import synthetic_task as task
import torch
from torch.utils.data import DataLoader, DistributedSampler


def parse_args() -> argparse.Namespace:
    p = task.parser(__doc__.splitlines()[0])
    p.add_argument("--fp16-allreduce", "--fp16_allreduce", type=task.str2bool, default=False)
    p.add_argument("--data-channel", "--data_channel", default="", help="train from this channel")
    p.add_argument("--data-framing", "--data_framing", default="recordio")
    p.add_argument("--shuffle-buffer", "--shuffle_buffer", type=int, default=1024)
    p.add_argument("--data-workers", "--data_workers", type=int, default=0)
    p.add_argument(
        "--fifo-timeout",
        "--fifo_timeout",
        type=seconds,
        default=600.0,
        help="Pipe mode: seconds a reader waits for each epoch's FIFO to appear (and its first "
        "byte, and the host's other readers) before it fails naming the FIFO",
    )
    p.add_argument(
        "--write-shards",
        "--write_shards",
        default="",
        help="write the generated data set as shards of --data-framing into this directory, exit",
    )
    p.add_argument("--records-per-shard", "--records_per_shard", type=int, default=1024)
    return p.parse_args()


def seconds(text: str) -> float:
    """A timeout hyperparameter, within byoc.data's bounds (above 0, at most 7 days; not nan or
    inf): checked before Horovod starts, so a bad value is one line naming it, not a traceback
    on every rank."""
    from byoc.data import limits

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    try:
        return limits.timeout("value", value)
    except ValueError as exc:  # "value=nan: a timeout must be ...": the rule, after the name
        raise argparse.ArgumentTypeError(f"{text!r}: {str(exc).split(': ', 1)[1]}") from None


def encode(x: torch.Tensor, y: torch.Tensor) -> bytes:
    return torch.cat([x, y]).to(torch.float32).numpy().astype("<f4").tobytes()


def decoder(features: int):
    size = (features + 1) * 4

    def decode(record: bytes) -> tuple[torch.Tensor, torch.Tensor]:
        if len(record) != size:
            raise ValueError(f"a record of {len(record)} bytes; --features {features} needs {size}")
        values = torch.frombuffer(bytearray(record), dtype=torch.float32)
        return values[:features], values[features:]

    return decode


def main() -> None:
    args = parse_args()
    if args.write_shards:
        from byoc.data import write_shards

        x, y = task.make_data(args).tensors
        paths = write_shards(
            (encode(x[i], y[i]) for i in range(len(x))),
            args.write_shards,
            framing=args.data_framing,
            records_per_shard=args.records_per_shard,
        )
        print(f"wrote {len(x)} records in {len(paths)} shards to {args.write_shards}", flush=True)
        return
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(args.seed)
    device = task.pick_device(hvd.local_rank())
    use_cuda = device.type == "cuda"

    sampler = None
    if args.data_channel:
        from byoc.data import ChannelDataset

        channel = ChannelDataset(
            args.data_channel,
            args.data_framing,
            transform=decoder(args.features),
            shuffle_buffer=args.shuffle_buffer,
            seed=args.seed,
            fifo_timeout=args.fifo_timeout,
        )
        loader = DataLoader(channel, batch_size=args.batch_size, num_workers=args.data_workers)
    else:
        dataset = task.make_data(args)
        sampler = DistributedSampler(
            dataset, num_replicas=size, rank=rank, shuffle=True, seed=args.seed
        )
        loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = task.make_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression
    )
    # Restore after wrapping: DistributedOptimizer builds a new optimizer, which would drop the
    # momentum a checkpoint brings.
    checkpoint = Path(args.checkpoint_dir) / "checkpoint.pt"
    start_epoch = 0
    if rank == 0:
        start_epoch = task.restore(task.load_checkpoint(checkpoint), model, optimizer)
    start_epoch = int(hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch"))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    amp = args.amp and use_cuda
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    loss_fn = torch.nn.MSELoss()
    net = task.compiled(args, model, rank)  # --compile: Horovod averages the same parameters
    task.print_start(rank, size, hvd.local_rank(), device)

    for epoch in range(start_epoch, args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        net.train()
        start, seen, total = time.perf_counter(), 0, 0.0
        for step, (xb, yb) in enumerate(loader):
            t0 = time.perf_counter()
            x, y = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            with torch.autocast(device.type, enabled=amp):
                loss = loss_fn(net(x), y)
            if amp:
                scaler.scale(loss).backward()
                optimizer.synchronize()
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            seen += len(x)
            total += loss.item() * len(x)
            first = step == 0 and epoch == start_epoch
            task.after_step(args, rank, first, time.perf_counter() - t0)
        if args.data_channel:
            hvd.join()  # a stream gives ranks uneven shares: wait for the others' last steps
            print(f"rank {rank}: epoch {epoch} read {seen} records", flush=True)
        avg = hvd.allreduce(torch.tensor(total / max(seen, 1)), name="epoch_loss").item()
        rate = hvd.allreduce(
            torch.tensor(seen / (time.perf_counter() - start)), op=hvd.Sum, name="epoch_rate"
        ).item()
        if rank == 0:
            task.print_epoch(epoch, avg, rate)
            task.save_checkpoint(checkpoint, model, optimizer, epoch)
        if args.epoch_sleep:
            time.sleep(args.epoch_sleep)

    if rank == 0:
        task.save_model(args.model_dir, model)
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
