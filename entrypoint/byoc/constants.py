"""Every file name, variable name and default of the SageMaker contract and of our launcher."""

from __future__ import annotations

# --- where /opt/ml lives (overridable so tests need no container) ---------------------------
ML_ROOT_ENV = "SAGEMAKER_BASE_DIR"  # the toolkit's own name for it
DEFAULT_ML_ROOT = "/opt/ml"

RESOURCE_CONFIG = "input/config/resourceconfig.json"
HYPERPARAMETERS = "input/config/hyperparameters.json"
INPUT_DATA_CONFIG = "input/config/inputdataconfig.json"
DATA_DIR = "input/data"
MODEL_DIR = "model"
OUTPUT_DIR = "output"
OUTPUT_DATA_DIR = "output/data"
CHECKPOINT_DIR = "checkpoints"
CODE_DIR = "code"
SUCCESS_FILE = "output/success"
FAILURE_FILE = "output/failure"

# --- variables the platform or the user sets -------------------------------------------------
SAGEMAKER_PROGRAM = "SAGEMAKER_PROGRAM"
SAGEMAKER_SUBMIT_DIRECTORY = "SAGEMAKER_SUBMIT_DIRECTORY"
TRAINING_JOB_NAME = "TRAINING_JOB_NAME"
# A managed warm pool's directory that outlives the job on the same instance (byoc.warmpool).
WARMPOOL_CACHE_ENV = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"
WARMPOOL_MIN_FREE = 1 << 30  # bytes free below which the cache is not used (a full disk)

# --- hyperparameters that steer the launcher (all removed from the user's arguments) ----------
HP_PREFIX = "sagemaker_"
HP_PROGRAM = "sagemaker_program"
HP_SUBMIT_DIRECTORY = "sagemaker_submit_directory"
HP_MPI_ENABLED = "sagemaker_mpi_enabled"  # SDK v2 distribution={"mpi": ...}
HP_PROCESSES_PER_HOST = "sagemaker_mpi_num_of_processes_per_host"
HP_CUSTOM_MPI_OPTIONS = "sagemaker_mpi_custom_mpi_options"
HP_TORCH_DISTRIBUTED_ENABLED = "sagemaker_torch_distributed_enabled"  # {"torch_distributed": ...}
# With instance groups: the groups the distribution runs on (a JSON list of names).
HP_DISTRIBUTION_GROUPS = "sagemaker_distribution_instance_groups"
# smdistributed launchers this image does not have (SDK v2 "smdistributed" and "pytorchddp").
HP_SMDISTRIBUTED = ("sagemaker_distributed_dataparallel_enabled", "sagemaker_pytorch_ddp_enabled")

# --- our own knobs (documented in docs/contract.md, "Settings") --------------------------------
CPU_SLOTS_ENV = "BYOC_CPU_SLOTS_PER_HOST"
DEFAULT_CPU_SLOTS = 1
MAX_SLOTS_PER_HOST = 256  # processes per host: more is a typo, not an instance
SSH_PORT_ENV = "BYOC_SSH_PORT"
DEFAULT_SSH_PORT = 2222
COORD_PORT_ENV = "BYOC_COORDINATOR_PORT"
DEFAULT_COORD_PORT = 2223
SSH_KEY_ENV = "BYOC_SSH_PRIVATE_KEY"  # the job's private key, PEM/OpenSSH text
SSH_KEY_FILE_ENV = "BYOC_SSH_PRIVATE_KEY_FILE"  # or a file holding it (a mounted secret)
PEER_TIMEOUT_ENV = "BYOC_PEER_TIMEOUT"  # s the leader waits for each worker's sshd
DEFAULT_PEER_TIMEOUT = 600.0
LEADER_TIMEOUT_ENV = "BYOC_LEADER_TIMEOUT"  # s a worker waits for the leader to appear
DEFAULT_LEADER_TIMEOUT = 900.0
LEADER_LOST_ENV = "BYOC_LEADER_LOST_AFTER"  # s of silence after which a worker gives up
DEFAULT_LEADER_LOST = 30.0
START_TIMEOUT_ENV = "HOROVOD_START_TIMEOUT"
DEFAULT_START_TIMEOUT = 600  # horovodrun's own default (30 s) is too short for big jobs
TERM_GRACE_ENV = "BYOC_TERM_GRACE"  # s between SIGTERM and SIGKILL of the job's processes
DEFAULT_TERM_GRACE = 60.0
SHM_MIN_BYTES = 1 << 30  # below this /dev/shm is reported as too small
DEFAULT_PROGRAM = "/opt/byoc/examples/train_synthetic.py"  # Horovod (the horovod launcher)
DEFAULT_DDP_PROGRAM = "/opt/byoc/examples/train_ddp.py"  # DDP (the torchrun launcher)
LAUNCHER_ENV = "BYOC_LAUNCHER"  # horovod, torchrun or none: overrides the hyperparameters
LAUNCHERS = ("horovod", "torchrun", "none")
TORCHRUN_PORT_ENV = "BYOC_TORCHRUN_PORT"  # torchrun's rendezvous port on the first host
# on (default): the torchrun launcher ends each Python rank without the interpreter's teardown once
# its result is known (byoc.clean_exit, pytorch/pytorch#190489); off: bare.
CLEAN_EXIT_ENV = "BYOC_CLEAN_EXIT"
DEFAULT_TORCHRUN_PORT = 29500
# SSH trust for a command of the platform's own (SageMaker SDK v3's drivers) in a training job:
# auto (for the SDK's MPI driver), on (any multi-host job), off.
SSH_TRUST_ENV = "BYOC_SSH_TRUST"
SSH_TRUST_MODES = ("auto", "on", "off")
# A stall (byoc.stall): the bound on a collective's wait and on a job whose ranks all do nothing.
STALL_TIMEOUT_ENV = "BYOC_STALL_TIMEOUT"  # s; 0: no bound of ours (the libraries' own defaults)
DEFAULT_STALL_TIMEOUT = 1800.0  # torch's own default for Gloo's collectives (NCCL's: 600)
MIN_STALL_TIMEOUT = 10.0  # below this, a healthy job's first step would already count
HOROVOD_STALL_CHECK_ENV = "HOROVOD_STALL_CHECK_TIME_SECONDS"  # the stall inspector's period
HOROVOD_STALL_SHUTDOWN_ENV = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"  # its end of the job
HOROVOD_STALL_CHECK = 60  # Horovod's own default period
# Where armed ranks keep their stack dumps (byoc.stacks); not uploaded, unlike output/data.
STACKS_DIR_ENV = "BYOC_STACKS_DIR"
STACKS_DIR = "output/.stacks"
# In-job restarts (byoc.restarts): a failed or stalled attempt runs again on the same hosts.
RESTARTS_ENV = "BYOC_RESTARTS"  # how many times at most; 0 (the default): none
MAX_RESTARTS = 100  # more is a typo: each restart costs a rendezvous and a checkpoint's reload
ATTEMPT_ENV = "BYOC_ATTEMPT"  # set by `train` for the program: 1, then 2, ... after restarts
REPORT_TIMEOUT = 30.0  # s the leader waits for the workers' results once its own is known
# s a host's ranks get to notice another host's failure (or the job's end) themselves, before
# SIGTERM (a data server that never ends by itself waits this long after the world's success)
END_GRACE_ENV = "BYOC_END_GRACE"
DEFAULT_END_GRACE = 20.0
# byoc-discover-hosts (byoc.discover): horovodrun --host-discovery-script for elastic jobs.
DISCOVER_HOSTS_ENV = "BYOC_DISCOVER_HOSTS"  # candidates: node{0..7}, a,b, each with :slots
DISCOVER_FILE_ENV = "BYOC_DISCOVER_FILE"  # or a file of them, one `host[:slots]` a line
# or a program that prints them (the MPI Operator's /etc/mpi/discover_hosts.sh), run each call
DISCOVER_COMMAND_ENV = "BYOC_DISCOVER_COMMAND"
DISCOVER_COMMAND_TIMEOUT = 10.0  # s: the operator's script only echoes; a stalled one is an error
DISCOVER_SLOTS_ENV = "BYOC_DISCOVER_SLOTS"  # slots of a candidate that names none
DISCOVER_PORT_ENV = "BYOC_DISCOVER_PORT"  # the port that must answer with an SSH banner
DEFAULT_DISCOVER_PORT = 22  # where neither BYOC_DISCOVER_PORT nor SSH_PORT (dev's sshd) is set
DISCOVER_TIMEOUT_ENV = "BYOC_DISCOVER_TIMEOUT"  # s for all probes together
DEFAULT_DISCOVER_TIMEOUT = 1.0  # horovodrun asks every second
# s a host that answered before stays listed while its probes go unanswered (a busy sshd or DNS);
# below 20 s, the earliest horovodrun retries a failed host with --blacklist-cooldown-range 10 60
DISCOVER_GRACE_ENV = "BYOC_DISCOVER_GRACE"
DEFAULT_DISCOVER_GRACE = 15.0
MAX_DISCOVER_GRACE = 600.0  # horovodrun's default --elastic-timeout
# the directory of its memory between calls and of its log (default: $TMPDIR/byoc-discover-<uid>)
DISCOVER_STATE_DIR_ENV = "BYOC_DISCOVER_STATE_DIR"
DISCOVER_LOG_MAX_BYTES = 1 << 20  # the log is rotated at this size: one older file is kept
MAX_DISCOVER_HOSTS = 1024
RUNTIME_DIR = "/run/byoc"
INIT_MARKER_ENV = "BYOC_INIT"  # set by byoc-init for all it starts (docker/bash-env.sh reads it)

# --- SM_* variables exported to the training processes ----------------------------------------
SM_HP_PREFIX = "SM_HP_"
SM_CHANNEL_PREFIX = "SM_CHANNEL_"
SM_MODEL_DIR = "SM_MODEL_DIR"
SM_OUTPUT_DIR = "SM_OUTPUT_DIR"
SM_OUTPUT_DATA_DIR = "SM_OUTPUT_DATA_DIR"
SM_INPUT_DIR = "SM_INPUT_DIR"
SM_INPUT_CONFIG_DIR = "SM_INPUT_CONFIG_DIR"
SM_CHANNELS = "SM_CHANNELS"
SM_HPS = "SM_HPS"
SM_HOSTS = "SM_HOSTS"
SM_CURRENT_HOST = "SM_CURRENT_HOST"
SM_CURRENT_INSTANCE_TYPE = "SM_CURRENT_INSTANCE_TYPE"
SM_NUM_GPUS = "SM_NUM_GPUS"
SM_NUM_CPUS = "SM_NUM_CPUS"
SM_NETWORK_INTERFACE_NAME = "SM_NETWORK_INTERFACE_NAME"
SM_USER_ARGS = "SM_USER_ARGS"
SM_USER_ENTRY_POINT = "SM_USER_ENTRY_POINT"
SM_MODULE_DIR = "SM_MODULE_DIR"
SM_MODULE_NAME = "SM_MODULE_NAME"
SM_TRAINING_ENV = "SM_TRAINING_ENV"
SM_RESOURCE_CONFIG = "SM_RESOURCE_CONFIG"
SM_INPUT_DATA_CONFIG = "SM_INPUT_DATA_CONFIG"
SM_LOG_LEVEL = "SM_LOG_LEVEL"
SM_FRAMEWORK_MODULE = "SM_FRAMEWORK_MODULE"
SM_CHECKPOINT_DIR = "SM_CHECKPOINT_DIR"  # ours: SageMaker has none, scripts often want one
# As the SageMaker SDK v3's drivers set them (scripts written for ModelTrainer read them).
SM_HOST_COUNT = "SM_HOST_COUNT"
SM_CURRENT_HOST_RANK = "SM_CURRENT_HOST_RANK"
SM_MASTER_ADDR = "SM_MASTER_ADDR"

# --- CUDA forward compatibility (byoc.cuda_compat; docs/gpu-efa.md) ----------------------------
CUDA_COMPAT_ENV = "BYOC_CUDA_COMPAT"  # auto (default), on, off
CUDA_COMPAT_MODES = ("auto", "on", "off")
CUDA_COMPAT_DIR = "/usr/local/cuda/compat"  # cuda-compat in the nvidia/cuda bases
NVIDIA_DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"  # the host's kernel module

# --- development mode: `docker run IMAGE` with no command (docs/development.md) ----------------
DEV_COMMAND = "dev"  # the image's CMD
JUPYTER_TOKEN_ENV = "JUPYTER_TOKEN"
JUPYTER_PORT_ENV = "JUPYTER_PORT"
DEFAULT_JUPYTER_PORT = 8888
NOTEBOOK_DIR_ENV = "JUPYTER_ROOT_DIR"
DEFAULT_NOTEBOOK_DIR = "/workspace"
JUPYTER_ENABLED_ENV = "BYOC_JUPYTER"  # 0: no Jupyter
DEV_SSH_PORT_ENV = "SSH_PORT"
DEFAULT_DEV_SSH_PORT = 22
SSHD_ENABLED_ENV = "BYOC_SSHD"  # 0: no sshd
TENSORBOARD_ENABLED_ENV = "BYOC_TENSORBOARD"  # 0: no TensorBoard (default: as BYOC_JUPYTER)
TENSORBOARD_PORT_ENV = "BYOC_TENSORBOARD_PORT"
DEFAULT_TENSORBOARD_PORT = 6006
TENSORBOARD_LOGDIR = "runs"  # under the notebook root: torch's SummaryWriter's default
NOTEBOOK_ENABLED_ENV = "BYOC_NOTEBOOK"  # 0: do not copy the getting-started notebook
NOTEBOOK_SOURCE = "/opt/byoc/notebooks/getting-started.ipynb"  # docker/notebooks/
AUTHORIZED_KEYS_ENV = "SSH_AUTHORIZED_KEYS"  # public keys, one a line
AUTHORIZED_KEYS_FILE_ENV = "SSH_AUTHORIZED_KEYS_FILE"  # a mounted file of them
DEFAULT_AUTHORIZED_KEYS_FILE = "/etc/byoc/authorized_keys"
DEV_USER_ENV = "BYOC_USER"  # run Jupyter and SSH logins as this user instead of root
DEV_UID_ENV = "BYOC_UID"
DEV_GID_ENV = "BYOC_GID"
DEFAULT_DEV_UID = 1000
SSH_PEERS_ENV = "BYOC_SSH_PEERS"  # ssh Host patterns of the other nodes (the compose cluster)
SSH_PEER_KEY_FILE_ENV = "BYOC_SSH_PEER_KEY_FILE"  # the private key for them
HOST_KEY_DIR = "/etc/ssh"
DEV_RUNTIME_DIR = "/run/byoc/dev"
PROFILE_SNIPPET = "/etc/profile.d/00-byoc-env.sh"
PEERS_CLIENT_CONFIG = "/etc/ssh/ssh_config.d/byoc-peers.conf"
DEV_STOP_GRACE = 8.0  # s the services get after SIGTERM before SIGKILL
# Variables SSH sessions get from the container's environment (a login shell would lose them).
SESSION_ENV_NAMES = ("PATH", "VENV", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "LD_LIBRARY_PATH")
SESSION_ENV_PREFIXES = (
    "OMPI_",
    "NVIDIA_",
    "CUDA_",
    "NCCL_",
    "HOROVOD_",
    "BYOC_FLAVOR",
    "NV_",
    # byoc-init's fabric decision (byoc.fabric), so horovodrun from an SSH session uses EFA too
    "FI_",
    "RDMAV_",
    "BYOC_FABRIC_SET",
    # byoc-discover-hosts' candidates, for elastic horovodrun from an SSH session
    "BYOC_DISCOVER_",
)
