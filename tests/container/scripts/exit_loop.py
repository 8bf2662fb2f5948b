"""Count how often a torch.distributed script fails at exit across two hosts of the local
cluster (docs/pytorch.md, "DDP scripts that abort at exit"): N two-node torchrun runs of SCRIPT,
bare or through byoc.clean_exit, one rank per node, with the bench's runner (every host's
output kept, the step ended as soon as one host's half fails).

    scripts/cluster.sh exec python /workspace/exit_loop.py RUNS SCRIPT [--clean] [--example]

--example passes SCRIPT the options `make bench` gives the DDP example (a fresh model and
checkpoint directory each run), for copies of train_ddp.py.
"""

import re
import sys
import time

from byoc.bench.run import StepError, torchrun_everywhere, train_args


def main(argv: list[str]) -> int:
    runs, script, clean, example = int(argv[0]), argv[1], "--clean" in argv, "--example" in argv
    head = ["-m", "byoc.clean_exit", script] if clean else [script]
    failed = 0
    start = time.monotonic()
    for i in range(1, runs + 1):
        try:
            program = [*head, *(train_args(True) if example else [])]
            torchrun_everywhere(["node0", "node1"], 1, program, timeout=120)
            result = "ok"
        except StepError as exc:
            failed += 1
            text = str(exc)
            signal = re.search(r"exitcode\s*:\s*-(\d+)", text)  # torchrun's failure summary
            cause = f"a rank died of signal {signal.group(1)}" if signal else "no signal"
            result = f"FAILED ({cause}):\n{text[-3000:]}"
        print(f"run {i}/{runs} {result}", flush=True)
    mode = "through byoc.clean_exit" if clean else "bare"
    took = time.monotonic() - start
    print(f"{script} {mode}: {failed} of {runs} runs failed ({took:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
