"""ChannelDataset: one API over a SageMaker channel in Pipe, File or FastFile mode.

    from byoc.data import ChannelDataset
    ds = ChannelDataset("train", framing="recordio", shuffle_buffer=1024, seed=1,
                        transform=decode)
    loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2)

Each iteration is one epoch. Every record of the channel is read by exactly one consumer (a rank,
or a DataLoader worker of a rank) per epoch:

- File/FastFile: files under input/data/<channel>, sorted. Consumers share them by file when
  there are at least as many files as consumers, else by record stride (shard="file"|"record"
  forces one). With S3DistributionType ShardedByS3Key each host holds its own files and only the
  host's consumers share them; FullyReplicated files are shared by all consumers of the job.
- Pipe: FIFOs input/data/<channel>_<epoch>, waited for up to fifo_timeout. A FIFO can be read by
  one process: pipe_strategy="fanout" (default) has local rank 0 (worker 0) read it and deal the
  records to the host's consumers over local sockets; pipe_strategy="per_rank" expects one
  channel per local rank (channel "train_{local_rank}") and no DataLoader workers. With
  FullyReplicated every host gets the whole stream and keeps every host_count-th record.

The epoch counter lives in a small state file per consumer (DataLoader workers are re-created
each epoch), so the next iteration reads the next FIFO; set_epoch() sets it explicitly.
Ranks come from horovodrun's environment (Gloo: HOROVOD_*, MPI: OMPI_COMM_WORLD_*), else from
an initialized Horovod, else one process; all can be passed explicitly. A topology that cannot
be (a size of 0, a rank past the size, ...) is a ChannelError naming the variable.

Bounds (byoc.data.limits): a record above max_record_bytes ($BYOC_MAX_RECORD_BYTES, 256 MiB) is a
RecordError; a Pipe-mode writer silent for stall_timeout ($BYOC_PIPE_STALL_TIMEOUT, 600 s) with
the FIFO still open is a StallError; every timeout must be a finite number of seconds above 0.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import re
import socket
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from byoc import config
from byoc import constants as C
from byoc.data import fanout, limits
from byoc.data import framing as fr
from byoc.data.pipe import ChannelError, pipe_records

try:  # The image has torch; the module also works (and is tested) without it.
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # pragma: no cover - depends on the environment
    _Base = object  # type: ignore[assignment,misc]

STATE_DIR_ENV = "BYOC_DATA_STATE_DIR"
FILE_MODES = ("File", "FastFile")


@dataclass(frozen=True)
class Topology:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    host_rank: int = 0
    host_count: int = 1


_FIELDS = ("rank", "size", "local_rank", "local_size", "host_rank", "host_count")


def _env_int(env: dict[str, str], *names: str) -> tuple[str | None, int | None]:
    """(the first of names that is set, its value), or (None, None)."""
    for name in names:
        value = env.get(name, "").strip()
        if value:
            try:
                return name, int(value)
            except ValueError:
                raise ChannelError(f"{name}={value!r} is not a number") from None
    return None, None


def check_topology(topo: Topology, source: dict[str, str] | None = None) -> Topology:
    """topo, or a ChannelError naming where the value that cannot be came from (source: field to
    variable name; a value no data could be shared by would divide by zero or lose records)."""
    src = source or {f: f"Topology.{f}" for f in _FIELDS}

    def bad(field: str, rule: str) -> ChannelError:
        return ChannelError(f"{src[field]}={getattr(topo, field)!r}: {rule}")

    for field in _FIELDS:
        value = getattr(topo, field)
        if not limits.whole(value):
            raise bad(field, "must be a whole number")
    size, local_size, hosts = src["size"], src["local_size"], src["host_count"]
    if topo.size < 1:
        raise bad("size", "the number of processes must be at least 1")
    if not 0 <= topo.rank < topo.size:
        raise bad("rank", f"must be from 0 to {size} - 1 ({topo.size - 1})")
    if not 1 <= topo.local_size <= topo.size:
        raise bad("local_size", f"processes on this host must be from 1 to {size} ({topo.size})")
    if not 0 <= topo.local_rank < topo.local_size:
        raise bad("local_rank", f"must be from 0 to {local_size} - 1 ({topo.local_size - 1})")
    if not 1 <= topo.host_count <= topo.size:
        raise bad("host_count", f"the number of hosts must be from 1 to {size} ({topo.size})")
    if not 0 <= topo.host_rank < topo.host_count:
        raise bad("host_rank", f"must be from 0 to {hosts} - 1 ({topo.host_count - 1})")
    return topo


_SLURM_COUNTS = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def _slurm_topology(env: dict[str, str], rank: int, size: int) -> Topology:
    """A task that srun started directly (srun --mpi=pmix, or srun python): its place from the
    step's SLURM_* variables, which count tasks per node as in `2(x3),1`."""
    lr_var, local_rank = _env_int(env, "SLURM_LOCALID")
    hr_var, host_rank = _env_int(env, "SLURM_NODEID")
    hc_var, host_count = _env_int(env, "SLURM_STEP_NUM_NODES")
    counts_var = "SLURM_STEP_TASKS_PER_NODE"
    text = env.get(counts_var, "").strip()
    if None in (local_rank, host_rank, host_count) or not text:
        raise ChannelError(
            "SLURM_PROCID is set, but not all of SLURM_LOCALID, SLURM_NODEID, "
            f"SLURM_STEP_NUM_NODES and {counts_var}: run the program as an srun step's tasks"
        )
    counts: list[int] = []
    for part in text.split(","):
        m = _SLURM_COUNTS.fullmatch(part.strip())
        if not m or len(counts) > 100_000:
            raise ChannelError(f"{counts_var}={text!r} is not Slurm's form, e.g. '2(x3),1'")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    if len(counts) != host_count or sum(counts) != size or not 0 <= host_rank < len(counts):
        raise ChannelError(
            f"{counts_var}={text!r} does not add up to SLURM_STEP_NUM_NODES={host_count} "
            f"nodes and SLURM_STEP_NUM_TASKS={size} tasks (SLURM_NODEID={host_rank})"
        )
    source = {
        "rank": "SLURM_PROCID",
        "size": "SLURM_STEP_NUM_TASKS",
        "local_rank": lr_var,
        "local_size": f"{counts_var}[SLURM_NODEID]",
        "host_rank": hr_var,
        "host_count": hc_var,
    }
    topo = Topology(rank, size, local_rank, counts[host_rank], host_rank, host_count)
    return check_topology(topo, source)


def topology(env: dict[str, str] | None = None) -> Topology:
    """This process's place in the job, from horovodrun's, mpirun's, torchrun's or srun's
    environment (or Horovod, or alone); ChannelError naming the variable when it cannot be."""
    env = dict(os.environ if env is None else env)
    rank_var, rank = _env_int(env, "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK")
    size_var, size = _env_int(env, "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE")
    step = [env.get(n, "").strip() for n in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS")]
    if rank is None and size is None and all(step):
        # A task srun started itself (srun --mpi=pmix, srun python): no launcher set anything.
        # Both, as only a step's tasks have them (a batch script has SLURM_PROCID alone).
        return _slurm_topology(
            env, _env_int(env, "SLURM_PROCID")[1], _env_int(env, "SLURM_STEP_NUM_TASKS")[1]
        )
    if rank is None and size is None:
        try:
            import horovod.torch as hvd

            if hvd.is_initialized():
                return check_topology(
                    Topology(
                        hvd.rank(),
                        hvd.size(),
                        hvd.local_rank(),
                        hvd.local_size(),
                        hvd.cross_rank(),
                        hvd.cross_size(),
                    ),
                    {f: f"horovod {f}" for f in _FIELDS},
                )
        except ImportError:
            pass
        return Topology()
    if rank is None or size is None:
        # Alone, every rank would read all of the data: refused rather than trained on twice.
        have = rank_var or size_var
        missing = "world size (HOROVOD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or WORLD_SIZE)"
        if rank is None:
            missing = "rank (HOROVOD_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or RANK)"
        raise ChannelError(f"{have}={env[have].strip()!r} is set, but no {missing} is")
    lr_var, local_rank = _env_int(
        env, "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"
    )
    ls_var, local_size = _env_int(
        env, "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"
    )
    if local_rank is None or local_size is None:
        # no word on hosts: take it as one host
        lr_var, local_rank, ls_var, local_size = rank_var, rank, size_var, size
    source = {
        "rank": rank_var,
        "size": size_var,
        "local_rank": lr_var,
        "local_size": ls_var,
        "host_rank": "host rank",
        "host_count": "host count",
    }
    check_topology(Topology(rank, size, local_rank, local_size, 0, 1), source)
    # horovodrun and torchrun place ranks host by host, the same number on each.
    hr_var, host_rank = _env_int(env, "HOROVOD_CROSS_RANK", "GROUP_RANK")
    hc_var, host_count = _env_int(env, "HOROVOD_CROSS_SIZE")
    if host_rank is None or host_count is None:
        if size % local_size:
            raise ChannelError(
                f"{size_var}={size} is not a multiple of {ls_var}={local_size}, so the host of "
                "each rank cannot be worked out: set HOROVOD_CROSS_RANK and HOROVOD_CROSS_SIZE"
            )
        hr_var, host_rank = f"{rank_var} // {ls_var}", rank // local_size
        hc_var, host_count = f"{size_var} // {ls_var}", size // local_size
    source.update(host_rank=hr_var, host_count=hc_var)
    return check_topology(
        Topology(rank, size, local_rank, local_size, host_rank, host_count), source
    )


def _worker() -> tuple[int, int, bool]:
    """(worker id, worker count, whether this is a DataLoader worker process)."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1, False
    info = get_worker_info()
    return (0, 1, False) if info is None else (info.id, info.num_workers, True)


def list_files(directory: Path, where: str = "") -> list[Path]:
    """Data files under directory, recursively (through symlinks), in a stable order; hidden files
    and directories skipped. Nothing else is skipped silently: a broken symlink, a symlink loop
    (a directory reached twice), a FIFO, socket or device, or a directory that cannot be listed
    is a ChannelError naming it."""
    label = f"{where}: " if where else ""
    files: list[Path] = []
    seen: set[tuple[int, int]] = set()
    todo = [directory]
    while todo:
        d = todo.pop()
        try:
            st = d.stat()
            with os.scandir(d) as it:
                entries = [e for e in it if not e.name.startswith(".")]
        except OSError as exc:
            raise ChannelError(f"{label}cannot list {d}: {exc.strerror}") from None
        if (st.st_dev, st.st_ino) in seen:
            raise ChannelError(
                f"{label}{d} leads back to a directory already read (a symlink loop, or a second "
                "link to it): its files would be read twice"
            )
        seen.add((st.st_dev, st.st_ino))
        for entry in entries:
            path = Path(entry.path)
            try:
                mode = path.stat().st_mode
            except OSError as exc:
                what = "a symlink loop" if exc.errno == errno.ELOOP else "a broken symlink"
                if not path.is_symlink():
                    what = "unreadable"
                raise ChannelError(f"{label}{path} is {what} ({exc.strerror})") from None
            if stat.S_ISDIR(mode):
                todo.append(path)
            elif stat.S_ISREG(mode):
                files.append(path)
            else:
                raise ChannelError(
                    f"{label}{path} is neither a file nor a directory (a FIFO, socket or device)"
                )
    return sorted(files, key=lambda p: config.natural_key(str(p.relative_to(directory))))


def shuffled(records: Iterable[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """A local shuffle through a buffer of `size` records (no global shuffle in Pipe mode)."""
    buffer: list[Any] = []
    for record in records:
        if len(buffer) < size:
            buffer.append(record)
            continue
        i = rng.randrange(size)
        yield buffer[i]
        buffer[i] = record
    rng.shuffle(buffer)
    yield from buffer


def _process_start(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _check_channel(channel: object) -> None:
    """A SageMaker channel name, with {local_rank} / {rank} in it at most: nothing that could
    name a path outside input/data."""
    try:
        name = channel.format(local_rank=0, rank=0)  # type: ignore[attr-defined]
    except (AttributeError, KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"channel {channel!r}: a channel name, where only {{local_rank}} and {{rank}} are "
            f"filled in ({type(exc).__name__}: {exc})"
        ) from None
    if (
        len(name) > config.MAX_CHANNEL_NAME
        or not config.CHANNEL_NAME.fullmatch(name)
        or name in (".", "..")
    ):
        raise ValueError(
            f"channel {channel!r}: not a SageMaker channel name (letters, digits, '.', '-', '_'; "
            f"at most {config.MAX_CHANNEL_NAME}; not '.' or '..')"
        )


class ChannelDataset(_Base):  # type: ignore[misc,valid-type]
    def __init__(
        self,
        channel: str,
        framing: str = "recordio",
        *,
        transform: Callable[[bytes], Any] | None = None,
        mode: str | None = None,
        distribution: str | None = None,
        shard: str = "auto",
        pipe_strategy: str = "fanout",
        shuffle_buffer: int = 0,
        seed: int = 0,
        fifo_timeout: float = 600.0,
        stall_timeout: float | None = None,
        max_record_bytes: int | None = None,
        fanout_queue: int = 256,
        check_crc: bool = True,
        root: str | os.PathLike | None = None,
        topology: Topology | None = None,
        host: str | None = None,
        state_dir: str | os.PathLike | None = None,
    ):
        if framing not in fr.FRAMINGS:
            raise ValueError(f"framing {framing!r}: use one of {', '.join(fr.FRAMINGS)}")
        if mode is not None and mode not in (*FILE_MODES, "Pipe"):
            raise ValueError(f"mode {mode!r}: use File, FastFile or Pipe")
        if shard not in ("auto", "file", "record"):
            raise ValueError(f"shard {shard!r}: use auto, file or record")
        if pipe_strategy not in ("fanout", "per_rank"):
            raise ValueError(f"pipe_strategy {pipe_strategy!r}: use fanout or per_rank")
        if distribution not in (None, "FullyReplicated", "ShardedByS3Key"):
            raise ValueError(
                f"distribution {distribution!r}: use FullyReplicated or ShardedByS3Key"
            )
        if not limits.whole(shuffle_buffer):
            raise ValueError(f"shuffle_buffer={shuffle_buffer!r}: must be a whole number")
        if shuffle_buffer < 0:
            raise ValueError("shuffle_buffer must be >= 0")
        if not limits.whole(fanout_queue) or fanout_queue < 1:
            raise ValueError(f"fanout_queue={fanout_queue!r}: must be a whole number >= 1")
        _check_channel(channel)
        if topology is not None:
            check_topology(topology)
        self.channel = channel
        self.framing = framing
        self.transform = transform
        self.mode = mode
        self.distribution = distribution
        self.shard = shard
        self.pipe_strategy = pipe_strategy
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.fifo_timeout = limits.timeout("fifo_timeout", fifo_timeout)
        # Resolved here (from $BYOC_PIPE_STALL_TIMEOUT, $BYOC_MAX_RECORD_BYTES when not given):
        # a bad value fails now, and DataLoader workers and the fan-out reader get the same.
        self.stall_timeout = limits.stall_timeout(stall_timeout)
        self.max_record_bytes = limits.record_cap(max_record_bytes)
        self.fanout_queue = int(fanout_queue)
        self.check_crc = check_crc
        self.root = Path(root) if root is not None else None
        self.topology = topology
        self.host = host
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._epoch: int | None = None

    def set_epoch(self, epoch: int) -> None:
        """Read epoch `epoch` next (call it before each epoch, as with DistributedSampler)."""
        if (
            not (limits.whole(epoch) or isinstance(epoch, float) and epoch.is_integer())
            or epoch < 0
        ):
            raise ValueError(f"set_epoch({epoch!r}): an epoch is a whole number >= 0")
        self._epoch = int(epoch)

    # --- where things are --------------------------------------------------------------------
    def _root(self) -> Path:
        return self.root if self.root is not None else config.ml_root()

    def _host(self, root: Path) -> str:
        if self.host:
            return self.host
        try:
            return config.read_resource_config(root / C.RESOURCE_CONFIG)["current_host"]
        except Exception:  # noqa: BLE001 - outside SageMaker: this machine
            return socket.gethostname()

    def _channel_spec(self, name: str, root: Path) -> tuple[str, str]:
        """(mode, distribution) of the channel: arguments, inputdataconfig.json, or the disk."""
        mode, distribution = self.mode, self.distribution
        path = root / C.INPUT_DATA_CONFIG
        if (mode is None or distribution is None) and path.exists():
            _, channels = config.read_input_data_config(path)
            found = {ch.name: ch for ch in channels}
            if name in found:
                mode = mode or found[name].mode
                distribution = distribution or found[name].distribution
            elif mode is None:
                raise ChannelError(
                    f"channel {name!r} is not in {path} (channels: "
                    f"{', '.join(sorted(found)) or 'none'}); pass mode= to read it anyway"
                )
        data = root / C.DATA_DIR
        if mode is None:
            if (data / name).is_dir():
                mode = "File"
            elif (data / f"{name}_0").exists():
                mode = "Pipe"
            else:
                raise ChannelError(
                    f"channel {name!r}: neither {data / name}/ (File mode) nor {data / name}_0 "
                    "(Pipe mode) exists, and no inputdataconfig.json says which; pass mode="
                )
        return mode, distribution or "FullyReplicated"

    def _next_epoch(self, root: Path, name: str, consumer: int, in_worker: bool) -> int:
        if self._epoch is not None:
            epoch = self._epoch
            self._epoch += 1  # in this process; worker copies get set_epoch() from the loop
            return epoch
        # Keyed by the process that owns the iteration (the rank, also for its DataLoader
        # workers, which are new processes each epoch): a new run starts at epoch 0 again.
        owner = os.getppid() if in_worker else os.getpid()
        state_dir = self.state_dir or Path(
            os.environ.get(STATE_DIR_ENV) or Path(tempfile.gettempdir()) / "byoc-data-state"
        )
        # One counter per channel (FIFO sequence), shared by every dataset object reading it.
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
        where = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
        path = state_dir / f"{safe}.{where}.{owner}-{_process_start(owner)}.{consumer}"
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            try:
                text = path.read_text(errors="replace").strip()
            except FileNotFoundError:
                text = "0"
            if not text.isascii() or not text.isdigit():
                raise ChannelError(
                    f"channel {name!r}: the epoch counter {path} holds {text[:40]!r}, not an "
                    "epoch; delete it (or call set_epoch()) to go on"
                )
            epoch = int(text)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(str(epoch + 1))
            os.replace(tmp, path)
        except OSError as exc:
            raise ChannelError(
                f"channel {name!r}: the epoch counter in {state_dir} cannot be kept "
                f"({exc.strerror}: {exc.filename}); set state_dir= or ${STATE_DIR_ENV} to a "
                "writable directory"
            ) from None
        return epoch

    # --- reading -----------------------------------------------------------------------------
    def _read(self, stream, where: str) -> Iterator[bytes]:
        return fr.read(stream, self.framing, where, self.check_crc, self.max_record_bytes)

    def _file(self, directory: Path, path: Path, where: str) -> Iterator[bytes]:
        try:
            f = open(path, "rb", buffering=1 << 20)  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ChannelError(f"{where}: cannot read {path}: {exc.strerror}") from None
        with f:
            yield from self._read(f, f"{where} ({path.relative_to(directory)})")

    def _file_records(
        self, directory: Path, where: str, index: int, count: int, empty_ok: bool
    ) -> Iterator[bytes]:
        if not directory.is_dir():
            raise ChannelError(f"{where}: {directory} is not a directory (File mode)")
        files = list_files(directory, where)
        if not files and not empty_ok:
            raise ChannelError(
                f"{where}: {directory} holds no data files (hidden ones are skipped): is the "
                "channel's S3 prefix right?"
            )
        by_file = self.shard == "file" or (self.shard == "auto" and len(files) >= count)
        if by_file:
            for path in files[index::count]:
                yield from self._file(directory, path, where)
            return
        k = 0
        for path in files:
            for record in self._file(directory, path, where):
                if k % count == index:
                    yield record
                k += 1

    def records(self) -> Iterator[bytes | Any]:
        """One epoch of this consumer's records (what iterating the dataset yields)."""
        topo = self.topology or topology()
        worker, workers, in_worker = _worker()
        root = self._root()
        name = self.channel.format(local_rank=topo.local_rank, rank=topo.rank)
        mode, distribution = self._channel_spec(name, root)
        data = root / C.DATA_DIR
        if mode in FILE_MODES:
            if distribution == "ShardedByS3Key":
                index = topo.local_rank * workers + worker
                count = topo.local_size * workers
            else:
                index, count = topo.rank * workers + worker, topo.size * workers
            epoch = self._next_epoch(root, name, index, in_worker)
            where = f"channel {name!r} epoch {epoch}"
            # ShardedByS3Key: a host may get none of the objects when there are fewer than hosts.
            empty_ok = distribution == "ShardedByS3Key"
            records = self._file_records(data / name, where, index, count, empty_ok)
        else:
            replicated = distribution == "FullyReplicated"
            host_rank, host_count = (topo.host_rank, topo.host_count) if replicated else (0, 1)
            if self.pipe_strategy == "per_rank":
                if workers > 1:
                    raise ChannelError(
                        f"channel {name!r} (Pipe, per_rank): a FIFO can be read by one process; "
                        "use num_workers=0 or 1, or pipe_strategy='fanout'"
                    )
                index, count = 0, 1
            else:
                index, count = topo.local_rank * workers + worker, topo.local_size * workers
            epoch = self._next_epoch(root, name, index, in_worker)
            where = f"channel {name!r} epoch {epoch}"
            fifo = data / f"{name}_{epoch}"
            if count == 1:
                records = pipe_records(
                    fifo,
                    self.framing,
                    where,
                    self.fifo_timeout,
                    host_rank,
                    host_count,
                    self.check_crc,
                    stall_timeout=self.stall_timeout,
                    max_record_bytes=self.max_record_bytes,
                )
            else:
                key = f"{root.resolve()}|{self._host(root)}|{name}|{epoch}"
                server = None
                if index == 0:
                    server = fanout.start_server(
                        key=key,
                        consumers=count,
                        fifo=str(fifo),
                        framing=self.framing,
                        where=where,
                        timeout=self.fifo_timeout,
                        host_rank=host_rank,
                        host_count=host_count,
                        check_crc=self.check_crc,
                        stall_timeout=self.stall_timeout,
                        max_record_bytes=self.max_record_bytes,
                        queue=self.fanout_queue,
                    )
                records = fanout.consume(key, index, count, self.fifo_timeout + 60.0, where, server)
        if self.shuffle_buffer > 1:
            rng = random.Random(f"{self.seed}:{epoch}:{topo.rank}:{worker}")
            records = shuffled(records, self.shuffle_buffer, rng)
        if self.transform is not None:
            return map(self.transform, records)
        return records

    def __iter__(self) -> Iterator[Any]:
        return self.records()
