"""sagemaker_training.environment.Environment() loads a fake /opt/ml tree, and byoc's SM_*
variables for the same tree are the toolkit's own (the contract cannot drift from it)."""

import json
import os
import pathlib

root = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"])
config = root / "input" / "config"
config.mkdir(parents=True)
(root / "input" / "data" / "train").mkdir(parents=True)
(config / "resourceconfig.json").write_text(
    json.dumps(
        {
            "current_host": "algo-2",
            "hosts": ["algo-1", "algo-2"],
            "network_interface_name": "eth0",
            "current_instance_type": "ml.c5.xlarge",
            "current_group_name": "homogeneousCluster",
            "instance_groups": [
                {
                    "instance_group_name": "homogeneousCluster",
                    "instance_type": "ml.c5.xlarge",
                    "hosts": ["algo-2", "algo-1"],
                }
            ],
        }
    )
)
(config / "hyperparameters.json").write_text(
    json.dumps(
        {
            "epochs": "3",
            "sagemaker_program": '"train.py"',
            "lr": "0.1",
            "opts": '{"a": 1}',
            "sagemaker_mpi_enabled": "true",
            "sagemaker_region": '"us-west-2"',
        }
    )
)
(config / "inputdataconfig.json").write_text(
    json.dumps({"train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}})
)

from sagemaker_training import environment  # noqa: E402 - reads SAGEMAKER_BASE_DIR on import

env = environment.Environment()
assert env.current_host == "algo-2", env.current_host
assert env.hosts == ["algo-1", "algo-2"], env.hosts
assert env.hyperparameters == {"epochs": 3, "lr": 0.1, "opts": {"a": 1}}, env.hyperparameters
assert env.user_entry_point == "train.py", env.user_entry_point
assert env.channel_input_dirs == {"train": str(root / "input" / "data" / "train")}
assert env.network_interface_name == "eth0"

# byoc's variables for the same tree, as `train` computes them.
from byoc import config  # noqa: E402
from byoc import environment as ours  # noqa: E402

cfg = config.load(root)
mine = ours.sm_variables(
    cfg,
    entry_point="train.py",
    module_dir=str(root / "code"),
    num_gpus=env.num_gpus,
    num_cpus=env.num_cpus,
    user_args=ours.to_cmd_args(ours.user_hyperparameters(cfg.hyperparameters)),
)
theirs = env.to_env_vars()
OURS_ONLY = {"SM_CHECKPOINT_DIR", "SM_HOST_COUNT", "SM_CURRENT_HOST_RANK", "SM_MASTER_ADDR"}
assert set(mine) - set(theirs) == OURS_ONLY, sorted(set(mine) - set(theirs))
assert set(theirs) <= set(mine), sorted(set(theirs) - set(mine))
for key in sorted(theirs):
    a, b = theirs[key], mine[key]
    if key == "SM_TRAINING_ENV":  # ours holds a part of the toolkit's, and that part agrees
        a, b = json.loads(a), json.loads(b)
        a = {k: a[k] for k in b}
    assert a == b, (key, a, b)
print("SM_ENVIRONMENT_OK", env.current_host, env.hyperparameters, len(theirs), "variables agree")
