"""What the SageMaker Python SDK puts in a training job's hyperparameters for the image, decided
once for every tool that makes a job: `make local-train` (hostkit.local_train writes them into
/opt/ml trees) and `make launch` (hostkit.aws.launch sends them in CreateTrainingJob), so the
two cannot disagree. Values are plain Python here; hostkit.aws.limits.hyperparameters checks
them against SageMaker's limits and JSON-encodes them as the SDK does.
"""

from __future__ import annotations

DISTRIBUTIONS = ("mpi", "torch_distributed", "none")


def distribution_hyperparameters(
    distribution: str,
    *,
    processes_per_host: int | None = None,
    custom_mpi_options: str | None = None,
    instance_type: str | None = None,
) -> dict[str, object]:
    """What sagemaker.pytorch.PyTorch(image_uri=..., distribution=...) adds (SDK v2.257.7).

    mpi: distribution={"mpi": {"enabled": True[, "processes_per_host": N]
    [, "custom_mpi_options": S]}}: Framework._distribution_configuration (estimator.py) sets
    sagemaker_mpi_enabled, sagemaker_mpi_num_of_processes_per_host only when processes_per_host
    is given, and sagemaker_mpi_custom_mpi_options always ("" when not given).
    torch_distributed: distribution={"torch_distributed": {"enabled": True}}:
    PyTorch._pytorch_distribution_configuration (pytorch/estimator.py) sets
    sagemaker_torch_distributed_enabled and sagemaker_instance_type.
    none: distribution=None: nothing.
    """
    if distribution == "mpi":
        hps: dict[str, object] = {"sagemaker_mpi_enabled": True}
        if processes_per_host is not None:
            hps["sagemaker_mpi_num_of_processes_per_host"] = processes_per_host
        hps["sagemaker_mpi_custom_mpi_options"] = custom_mpi_options or ""
        return hps
    if distribution == "torch_distributed":
        return {
            "sagemaker_torch_distributed_enabled": True,
            "sagemaker_instance_type": instance_type,
        }
    if distribution == "none":
        return {}
    raise ValueError(f"distribution {distribution!r}: one of {', '.join(DISTRIBUTIONS)}")


def code_hyperparameters(program: str, submit_directory: str) -> dict[str, object]:
    """The user's code: the entry point, and where the SDK put the source directory (an S3
    tarball on SageMaker; /opt/ml/code, mounted, in local mode)."""
    return {"sagemaker_program": program, "sagemaker_submit_directory": submit_directory}
