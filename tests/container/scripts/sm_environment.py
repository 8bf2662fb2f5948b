"""sagemaker_training.environment.Environment() loads a fake /opt/ml tree."""

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
        }
    )
)
(config / "hyperparameters.json").write_text(
    json.dumps({"epochs": "3", "sagemaker_program": '"train.py"', "lr": "0.1"})
)
(config / "inputdataconfig.json").write_text(
    json.dumps({"train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}})
)

from sagemaker_training import environment  # noqa: E402 - reads SAGEMAKER_BASE_DIR on import

env = environment.Environment()
assert env.current_host == "algo-2", env.current_host
assert env.hosts == ["algo-1", "algo-2"], env.hosts
assert env.hyperparameters == {"epochs": 3, "lr": 0.1}, env.hyperparameters
assert env.user_entry_point == "train.py", env.user_entry_point
assert env.channel_input_dirs == {"train": str(root / "input" / "data" / "train")}
assert env.network_interface_name == "eth0"
print("SM_ENVIRONMENT_OK", env.current_host, env.hyperparameters)
