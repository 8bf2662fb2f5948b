"""`train` end to end on one host without Docker: exit codes and the failure/success files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.fakes import make_tree, run_train, with_program

ROOT = Path(__file__).resolve().parents[2]


def test_success_writes_success_and_passes_args_and_env(tmp_path):
    ml = with_program(
        tmp_path,
        "import os, sys, json\n"
        "out = os.path.join(os.environ['SM_MODEL_DIR'], 'm.txt')\n"
        "open(out, 'w').write(json.dumps(sys.argv[1:]))\n",
        hps={"epochs": "2"},
    )
    result = run_train(ml)
    assert result.returncode == 0, result.stderr
    assert (ml / "output" / "success").exists()
    assert json.loads((ml / "model" / "m.txt").read_text()) == ["--epochs", "2"]


def test_exception_names_the_cause_in_the_failure_file(tmp_path):
    ml = with_program(tmp_path, "raise ValueError('bad batch size 0')\n")
    result = run_train(ml)
    assert result.returncode == 1
    failure = (ml / "output" / "failure").read_text()
    assert failure.startswith(
        "Training failed: rank 0 on algo-1 raised ValueError: bad batch size 0"
    )
    assert not (ml / "output" / "success").exists()


def test_oom_kill_is_reported_as_memory(tmp_path):
    ml = with_program(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = run_train(ml)
    assert result.returncode == 137
    assert "out of memory" in (ml / "output" / "failure").read_text()


@pytest.mark.parametrize("broken", ["hyperparameters.json", "resourceconfig.json"])
def test_malformed_config_is_exit_2_with_message(tmp_path, broken):
    ml = make_tree(tmp_path, hosts=["algo-1"])
    (ml / "input" / "config" / broken).write_text('{"epochs": ')
    result = run_train(ml)
    assert result.returncode == 2
    assert "Invalid job configuration" in result.stderr and broken in result.stderr
    assert f"{broken} is not valid JSON" in (ml / "output" / "failure").read_text()


def test_missing_entry_point(tmp_path):
    ml = make_tree(tmp_path, hosts=["algo-1"], hps={"sagemaker_program": '"nope.py"'})
    result = run_train(ml)
    assert result.returncode == 2
    assert "nope.py not found" in (ml / "output" / "failure").read_text()
