"""Entrypoint of the pytorch-horovod image: PID 1 supervision and the SageMaker contract."""
