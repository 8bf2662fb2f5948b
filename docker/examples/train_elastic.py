"""Elastic Horovod + PyTorch training on generated data: hosts may join and leave mid-job.

Run it under elastic horovodrun, which asks a discovery command for the hosts every second:
    horovodrun -np 4 --min-np 2 --max-np 8 --host-discovery-script byoc-discover-hosts \
        python train_elastic.py
and it keeps training while hosts are added, stopped or die (docs/elastic.md). Static launches
(horovodrun -H, SageMaker's `train`) run it too, as a fixed set of hosts.

What elasticity needs, and this script shows:
- hvd.elastic.TorchState holds what survives a membership change: model, optimizer, the
  ElasticSampler (which samples of the epoch are done), the epoch and step counters;
- state.commit() every --commit-every steps saves it in memory and is where a new host is let
  in; a lost host rolls every survivor back to the last commit, so no step is counted twice;
- on every reset the LR is rescaled to the new size and the sampler re-shards what is left of
  the epoch (Horovod 0.28.1 does not re-shard it when hosts were only removed);
- checkpoints every epoch (rank 0, SM_CHECKPOINT_DIR) and resume from them, for the restarts
  elasticity cannot cover: the launcher's own host lost, or the job below --min-np.

Lines it prints, which the tests and `make bench` read: `ELASTIC init ...` when a process has
joined (`began=`: when its imports were done), `ELASTIC reset ...` on each membership change,
`ELASTIC training size=N ...` at the first step after it (with the wall clock, to time recovery
and joins), `COVERAGE epoch=...` with --check-coverage (every sample of every epoch
trained exactly once, apart from the sampler's padding), `WEIGHTS equal on N ranks` at the end.

Options, data, model and checkpoint format are those of train_synthetic.py (synthetic_task.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import horovod.torch as hvd
import synthetic_task as task
import torch
from torch.utils.data import DataLoader, TensorDataset


def parse_args():
    p = task.parser(__doc__.splitlines()[0])
    p.add_argument(
        "--commit-every",
        "--commit_every",
        type=int,
        default=10,
        help="steps between commits: fewer loses less work to a failure, more costs less",
    )
    p.add_argument(
        "--check-coverage",
        "--check_coverage",
        type=task.str2bool,
        default=False,
        help="count, across ranks, how often each sample is trained per epoch (one allreduce "
        "of samples+1 floats per step) and print the COVERAGE line",
    )
    p.add_argument(
        "--step-sleep",
        "--step_sleep",
        type=float,
        default=0.0,
        help="seconds to sleep per step (tests use it to change the hosts mid-epoch)",
    )
    p.add_argument(
        "--step-sleep-while",
        "--step_sleep_while",
        default="",
        help="sleep --step-sleep s per step only while this file exists (a test removes it once "
        "the hosts have changed, and the rest trains at full speed)",
    )
    p.add_argument("--slow-rank", "--slow_rank", type=int, default=-1)
    p.add_argument("--slow-at-step", "--slow_at_step", type=int, default=5)
    p.add_argument(
        "--slow-seconds",
        "--slow_seconds",
        type=float,
        default=0.0,
        help="--slow-rank's step --slow-at-step takes this long (a slow, healthy host)",
    )
    args = p.parse_args()
    if args.commit_every < 1:
        p.error("--commit-every must be at least 1")
    return args


def say(text: str) -> None:
    print(f"ELASTIC {text} rank={hvd.rank()} t={time.time():.3f}", flush=True)


def weights_digest(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> None:
    args = parse_args()
    began = time.time()  # after the imports (torch and Horovod: seconds of a host's join)
    hvd.init()
    say(f"init size={hvd.size()} began={began:.3f}")
    torch.manual_seed(args.seed)
    device = task.pick_device(hvd.local_rank())

    base = task.make_data(args)
    n = len(base)
    # The sample's index rides along, for --check-coverage.
    dataset = TensorDataset(*base.tensors, torch.arange(n))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = task.make_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    checkpoint = Path(args.checkpoint_dir) / "checkpoint.pt"
    epoch = 0
    if hvd.rank() == 0:  # the first sync sends it to the others
        epoch = task.restore(task.load_checkpoint(checkpoint), model, optimizer)

    state = hvd.elastic.TorchState(
        model=model,
        optimizer=optimizer,
        sampler=sampler,
        epoch=epoch,
        step=0,
        # samples 0..n-1: times trained this epoch; [n]: the sampler's padding among them.
        # Replaced, never changed in place: ObjectState keeps a reference as the commit.
        coverage=torch.zeros(n + 1, dtype=torch.float64),
    )
    process = {"resumed": False, "slowed": False}  # resumed: trained since the last reset

    def on_reset() -> None:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        state.sampler.reset()  # the new size and rank
        process["resumed"] = False
        say(f"reset size={hvd.size()}")

    state.register_reset_callbacks([on_reset])
    task.print_start(hvd.rank(), hvd.size(), hvd.local_rank(), device)
    loss_fn = torch.nn.MSELoss()

    @hvd.elastic.run
    def train(state) -> None:
        while state.epoch < args.epochs:
            model.train()
            start, seen, total = time.perf_counter(), 0, 0.0
            # Where this rank's samples sit in the sampler's padded list: past `remaining`
            # they are padding (repeats that make the shares even).
            rank, replicas = state.sampler.rank, state.sampler.num_replicas
            remaining = len(state.sampler.remaining_indices)
            for batch, (xb, yb, idx) in enumerate(loader):
                if args.step_sleep and (
                    not args.step_sleep_while or Path(args.step_sleep_while).exists()
                ):
                    time.sleep(args.step_sleep)
                if (
                    hvd.rank() == args.slow_rank
                    and state.step >= args.slow_at_step
                    and not process["slowed"]
                ):
                    process["slowed"] = True
                    print(f"rank {hvd.rank()}: a slow step of {args.slow_seconds} s", flush=True)
                    time.sleep(args.slow_seconds)
                x, y = xb.to(device), yb.to(device)
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                if args.check_coverage:
                    hits = torch.zeros(n + 1, dtype=torch.float64)
                    hits[:n] = torch.bincount(idx, minlength=n)  # a padded repeat counts too
                    first = batch * args.batch_size
                    positions = rank + replicas * torch.arange(first, first + len(idx))
                    hits[n] = float((positions >= remaining).sum())
                    state.coverage = state.coverage + hvd.allreduce(
                        hits, op=hvd.Sum, name="coverage"
                    )
                seen += len(x)
                total += loss.item() * len(x)
                state.sampler.record_batch(batch, args.batch_size)
                state.step += 1
                if not process["resumed"]:
                    process["resumed"] = True
                    say(f"training size={hvd.size()} epoch={state.epoch} step={state.step}")
                task.after_step(args, hvd.rank(), first=state.step == 1)
                if state.step % args.commit_every == 0:
                    state.commit()
            avg = hvd.allreduce(torch.tensor(total / max(seen, 1)), name="epoch_loss").item()
            rate = hvd.allreduce(
                torch.tensor(seen / (time.perf_counter() - start)), op=hvd.Sum, name="epoch_rate"
            ).item()
            if args.check_coverage:
                counts = state.coverage[:n]
                print(
                    f"COVERAGE epoch={state.epoch} samples={n} "
                    f"missing={int((counts == 0).sum())} "
                    f"extra={int(counts.sum()) - n} padding={int(state.coverage[n])} "
                    f"size={hvd.size()} rank={hvd.rank()}",
                    flush=True,
                )
            if hvd.rank() == 0:
                task.print_epoch(state.epoch, avg, rate)
                task.save_checkpoint(checkpoint, model, optimizer, state.epoch)
            if args.epoch_sleep:
                time.sleep(args.epoch_sleep)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.coverage = torch.zeros(n + 1, dtype=torch.float64)
            state.commit()

    train(state)
    digests = hvd.allgather_object(weights_digest(model), name="weights")
    if hvd.rank() == 0:
        verdict = "equal" if len(set(digests)) == 1 else f"DIFFER ({digests})"
        print(f"WEIGHTS {verdict} on {hvd.size()} ranks", flush=True)
        task.save_model(args.model_dir, model)
    print(f"rank {hvd.rank()}: done", flush=True)


if __name__ == "__main__":
    main()
