"""The SageMaker contract on fake /opt/ml trees: parsing, arguments, SM_* variables, the plan."""

from __future__ import annotations

import json
import sys
import tarfile

import pytest
from byoc import code, config, environment, plan, report, settings
from byoc import constants as C

from tests.unit.fakes import make_plan, make_tree

# What the SageMaker Python SDK writes for PyTorch(..., hyperparameters={...},
# distribution={"mpi": {"enabled": True, "processes_per_host": 4,
# "custom_mpi_options": "-x FOO=1"}}): every value JSON-encoded.
SDK_HPS = {
    "epochs": "3",
    "lr": "0.01",
    "use_amp": "true",
    "model_name": '"resnet"',
    "b": "1",
    "opts": '{"x": 1, "a": "b"}',
    "sagemaker_program": '"train.py"',
    "sagemaker_submit_directory": '"s3://bucket/job/source/sourcedir.tar.gz"',
    "sagemaker_mpi_enabled": "true",
    "sagemaker_mpi_num_of_processes_per_host": "4",
    "sagemaker_mpi_custom_mpi_options": '"-x FOO=1"',
    "sagemaker_region": '"us-east-1"',
}


def test_sdk_hyperparameters_decode_and_become_toolkit_arguments(tmp_path):
    cfg = config.load(make_tree(tmp_path, hps=SDK_HPS))
    assert cfg.hyperparameters["epochs"] == 3
    assert cfg.hyperparameters["sagemaker_program"] == "train.py"
    user = environment.user_hyperparameters(cfg.hyperparameters)
    assert environment.to_cmd_args(user) == [
        "-b",
        "1",
        "--epochs",
        "3",
        "--lr",
        "0.01",
        "--model_name",
        "resnet",
        "--opts",
        "a=b,x=1",
        "--use_amp",
        "True",
    ]


def test_undecodable_value_stays_a_string(tmp_path):
    cfg = config.load(make_tree(tmp_path, hps={"name": "plain text", "n": "007x"}))
    assert cfg.hyperparameters == {"name": "plain text", "n": "007x"}


def test_hosts_sort_naturally_and_leader_is_first(tmp_path):
    hosts = [f"algo-{i}" for i in (10, 2, 1, 3)]
    cfg = config.load(make_tree(tmp_path, hosts=hosts, current="algo-10"))
    assert cfg.hosts == ["algo-1", "algo-2", "algo-3", "algo-10"]
    assert cfg.leader == "algo-1" and not cfg.is_leader


def test_local_mode_host_names(tmp_path):
    cfg = config.load(
        make_tree(tmp_path, hosts=["algo-1-x7k2a", "algo-2-x7k2a"], current="algo-1-x7k2a")
    )
    assert cfg.is_leader


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON (line 1"),
        ('["a"]', "must hold a JSON object"),
        ('{"hosts": [], "current_host": "a"}', "hosts: must be a list of 1 to 1000 host names"),
        ('{"hosts": ["a"], "current_host": "b"}', "current_host: 'b' is not one of hosts"),
        ('{"hosts": ["a", "a"], "current_host": "a"}', "hosts: a host is listed twice"),
    ],
)
def test_malformed_resourceconfig_names_file_and_problem(tmp_path, content, message):
    make_tree(tmp_path)
    (tmp_path / C.RESOURCE_CONFIG).write_text(content)
    with pytest.raises(config.ConfigError, match="resourceconfig.json") as err:
        config.load(tmp_path)
    assert message in str(err.value)


def test_missing_resourceconfig(tmp_path):
    with pytest.raises(config.ConfigError, match="is missing"):
        config.load(tmp_path)


def test_malformed_hyperparameters(tmp_path):
    make_tree(tmp_path)
    (tmp_path / C.HYPERPARAMETERS).write_text('{"epochs": 3,,}')
    with pytest.raises(config.ConfigError, match=r"hyperparameters.json is not valid JSON"):
        config.load(tmp_path)


def test_channels_and_optional_keys(tmp_path):
    channels = {
        "train": {"TrainingInputMode": "Pipe"},
        "val": {"TrainingInputMode": "FastFile", "S3DistributionType": "ShardedByS3Key"},
    }
    cfg = config.load(make_tree(tmp_path, channels=channels))
    assert [(c.name, c.mode, c.distribution) for c in cfg.channels] == [
        ("train", "Pipe", None),
        ("val", "FastFile", "ShardedByS3Key"),
    ]
    bad = {"train": {"TrainingInputMode": "Stream"}}
    make_tree(tmp_path, channels=bad)
    with pytest.raises(config.ConfigError, match="train.TrainingInputMode: 'Stream' is not one of"):
        config.load(tmp_path)


def test_sm_variables(tmp_path):
    cfg = config.load(
        make_tree(tmp_path, hps=SDK_HPS, channels={"train": {"TrainingInputMode": "File"}})
    )
    env = environment.sm_variables(
        cfg,
        entry_point="train.py",
        module_dir="/opt/ml/code",
        num_gpus=8,
        num_cpus=96,
        user_args=["--epochs", "3"],
    )
    assert env["SM_CHANNEL_TRAIN"] == str(tmp_path / "input/data/train")
    assert env["SM_CHANNELS"] == '["train"]'
    assert env["SM_HOSTS"] == '["algo-1","algo-2"]'
    assert env["SM_HP_EPOCHS"] == "3"
    assert env["SM_HP_MODEL_NAME"] == "resnet"
    assert "SM_HP_SAGEMAKER_PROGRAM" not in env
    assert json.loads(env["SM_HPS"])["opts"] == {"a": "b", "x": 1}
    assert env["SM_NUM_GPUS"] == "8" and env["SM_CURRENT_HOST"] == "algo-1"
    assert env["SM_MODEL_DIR"] == str(tmp_path / "model")
    assert env["SM_NETWORK_INTERFACE_NAME"] == "eth0"
    assert json.loads(env["SM_USER_ARGS"]) == ["--epochs", "3"]
    training = json.loads(env["SM_TRAINING_ENV"])
    assert training["hosts"] == ["algo-1", "algo-2"] and training["num_gpus"] == 8
    merged = environment.merged_environment({"SM_MODEL_DIR": "/mine", "PATH": "/bin"}, env)
    assert merged["SM_MODEL_DIR"] == "/mine" and merged["PATH"] == "/bin"


def test_plan_multi_host_with_sdk_mpi_options(tmp_path):
    cfg = config.load(make_tree(tmp_path, hps=SDK_HPS))
    p = make_plan(cfg, ["python", "train.py"], num_gpus=8, interface="eth0")
    assert p.role == "leader" and p.slots == 4 and p.world_size == 8
    assert p.command == [
        "horovodrun",
        "-np",
        "8",
        "-H",
        "algo-1:4,algo-2:4",
        "--start-timeout",
        "600",
        "-p",
        "2222",
        "--network-interface",
        "eth0",
        "--mpi-args",
        "-x FOO=1",
        sys.executable,
        "-m",
        "byoc.rank",
        "python",
        "train.py",
    ]


def test_plan_slots_default_to_gpus_then_cpu_setting(tmp_path):
    cfg = config.load(make_tree(tmp_path, current="algo-2"))
    assert make_plan(cfg, ["x"], num_gpus=8).slots == 8
    assert make_plan(cfg, ["x"], num_gpus=0).slots == 1
    worker = make_plan(cfg, ["x"], num_gpus=0, env={C.CPU_SLOTS_ENV: "3"})
    assert worker.role == "worker" and worker.slots == 3
    with pytest.raises(settings.SettingsError, match="BYOC_CPU_SLOTS_PER_HOST='zero'"):
        make_plan(cfg, ["x"], num_gpus=0, env={C.CPU_SLOTS_ENV: "zero"})


def test_single_host_needs_no_ssh(tmp_path):
    cfg = config.load(make_tree(tmp_path, hosts=["algo-1"]))
    assert make_plan(cfg, ["python", "t.py"], num_gpus=0).command == ["python", "t.py"]
    multi = make_plan(cfg, ["python", "t.py"], num_gpus=2)
    assert multi.command[:5] == ["horovodrun", "-np", "2", "-H", "algo-1:2"]
    assert "-p" not in multi.command


def test_rank_to_host(tmp_path):
    cfg = config.load(make_tree(tmp_path))
    assert [plan.rank_host(r, cfg, 2) for r in range(4)] == ["algo-1"] * 2 + ["algo-2"] * 2


def test_watcher_names_the_rank_that_raised():
    w = report.OutputWatcher()
    for line in [
        "[1,0]<stdout>:epoch 0",
        "[1,3]<stderr>:Traceback (most recent call last):",
        '[1,3]<stderr>:  File "train.py", line 9, in <module>',
        "[1,3]<stderr>:    raise ValueError('boom')",
        "[1,3]<stderr>:ValueError: boom",
        "[1,1]<stderr>:Traceback (most recent call last):",
        "[1,1]<stderr>:RuntimeError: Horovod has been shut down",
    ]:
        w.feed(line)
    assert (w.failures[0].rank, w.failures[0].exception) == (3, "ValueError: boom")
    glued = report.OutputWatcher()
    for line in [
        "[1,2]<stderr>:Traceback (most recent call last):",
        "[1,2]<stderr>:    [1,2]<stderr>:main()[1,2]<stderr>:",
        "[1,2]<stderr>:RuntimeError[1,2]<stderr>:: [1,2]<stderr>:deliberate[1,2]<stderr>:",
    ]:
        glued.feed(line)
    assert glued.failures[0].exception == "RuntimeError: deliberate"
    # Another rank's unfinished line ran into this traceback's first line (print's newline is a
    # write of its own), and came back later: seen in CI, where the cause went unnamed.
    interleaved = report.OutputWatcher()
    for line in [
        "[1,2]<stdout>:HETERO rank=2 sum=6[1,3]<stderr>:Traceback (most recent call last):",
        '[1,3]<stderr>:  File "hetero.py", line 51, in <module>',
        "[1,2]<stdout>:",
        "[1,3]<stderr>:RuntimeError: deliberate on algo-3",
    ]:
        interleaved.feed(line)
    assert [(f.rank, f.exception) for f in interleaved.failures] == [
        (3, "RuntimeError: deliberate on algo-3")
    ]
    assert "exit code 137" in report.describe_exit(137) and "memory" in report.describe_exit(137)


def test_rank_lines_joins_each_ranks_pieces_as_the_watcher_does():
    """The container tests read rank output through rank_lines: a line mpirun cut by another
    rank's tag comes back whole, under its own rank, where its newline arrives."""
    text = "\n".join(
        [
            "byoc: launching",
            "[1,0]<stdout>:sum=6[1,2]<stdout>:REPLAY max_diff=0",
            "[1,0]<stdout>:",
            "[3]<stderr>:gloo rank 3",
            "[rank1]: Traceback (most recent call last):",
            "[1,1]<stdout>:RESULT [1,1]<stdout>:rank=1[1,1]<stdout>:",
        ]
    )
    assert report.rank_lines(text) == [
        (0, "byoc: launching"),
        (2, "REPLAY max_diff=0"),
        (0, "sum=6"),
        (3, "gloo rank 3"),
        (1, "Traceback (most recent call last):"),
        (1, "RESULT rank=1"),
    ]


def test_code_from_tarball_and_entry_point_kinds(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    (src / "run.sh").write_text("echo hi\n")
    archive = tmp_path / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for f in src.iterdir():
            tar.add(f, arcname=f.name)
    dest = tmp_path / "code"
    code.stage(str(archive), dest)
    assert code.resolve("train.py", dest).command == [sys.executable, str(dest / "train.py")]
    assert code.resolve("run.sh", dest).command == ["/bin/bash", str(dest / "run.sh")]
    with pytest.raises(code.CodeError, match="missing.py not found"):
        code.resolve("missing.py", dest)
    with pytest.raises(code.CodeError, match="neither an s3:// URI"):
        code.stage(str(tmp_path / "nope"), dest)
    assert code.resolve(None, dest).entry_point == C.DEFAULT_PROGRAM
    # An absolute entry point (a script in the image) runs in its own directory, with no code.
    absolute = code.resolve(str(src / "train.py"), tmp_path / "no-code-channel")
    assert absolute.command == [sys.executable, str(src / "train.py")]
    assert absolute.code_dir == src  # the working directory
    with pytest.raises(code.CodeError, match=f"not found in {src}"):
        code.resolve(str(src / "missing.py"), tmp_path / "no-code-channel")


def test_unsafe_tarball_is_refused(tmp_path):
    archive = tmp_path / "evil.tar"
    payload = tmp_path / "p"
    payload.write_text("x")
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="../../escape")
    with pytest.raises(code.CodeError, match="evil.tar is unsafe: .*escape"):
        code.stage(str(archive), tmp_path / "code")
    assert not (tmp_path.parent / "escape").exists()


def test_failure_and_success_files(tmp_path):
    report.write_failure(tmp_path, "Training failed: rank 3 raised ValueError: boom")
    assert (tmp_path / C.FAILURE_FILE).read_text().startswith("Training failed: rank 3")
    report.write_success(tmp_path)
    assert (tmp_path / C.SUCCESS_FILE).exists() and not (tmp_path / C.FAILURE_FILE).exists()


def test_the_contracts_limits_and_the_host_tools_copies_are_sagemakers_own():
    """config.py (the image) and hostkit/aws (host tools, no import of byoc) each hold the
    platform's limits and the SM_* spelling; both are held here against botocore's model and
    each other, so neither can drift."""
    import botocore.session

    from hostkit import job
    from hostkit.aws import launch, limits

    model = botocore.session.get_session().get_service_model("sagemaker")

    def meta(shape):
        return model.shape_for(shape).metadata

    assert meta("ChannelName")["max"] == config.MAX_CHANNEL_NAME
    assert config.CHANNEL_NAME.pattern == meta("ChannelName")["pattern"].replace(r"\.", ".")
    assert meta("InputDataConfig")["max"] == config.MAX_CHANNELS
    assert meta("HyperParameters")["max"] == config.MAX_HYPERPARAMETERS
    assert meta("HyperParameterKey")["max"] == config.MAX_HP_KEY
    assert meta("HyperParameterValue")["max"] == config.MAX_HP_VALUE
    for name in ("a-b", "x.y z", "Train_1", "ü"):
        assert limits.env_key(name) == config.env_key(name)
    assert job.CPU_SLOTS_ENV == C.CPU_SLOTS_ENV
    assert job.MAX_PROCESSES_PER_HOST == C.MAX_SLOTS_PER_HOST
    assert launch.SSH_KEY_ENV == C.SSH_KEY_ENV
