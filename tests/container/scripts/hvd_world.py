"""Horovod under a launcher we do not control: who runs where, and an exact allreduce.

Prints one line per rank, `WORLD {"rank", "size", "hostname", "sum", "args"}`; rank 0 saves
model.pt into SM_MODEL_DIR. Unknown arguments (hyperparameters) are only reported.
"""

import json
import os
import socket
import sys

import horovod.torch as hvd
import torch

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="sum").item()
line = {
    "rank": hvd.rank(),
    "size": hvd.size(),
    "hostname": socket.gethostname(),
    "sum": total,
    "args": sys.argv[1:],
}
sys.stdout.write("WORLD " + json.dumps(line) + "\n")  # one write: ranks share the pipe
sys.stdout.flush()
if hvd.rank() == 0:
    torch.save(
        {"sum": total}, os.path.join(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"), "model.pt")
    )
