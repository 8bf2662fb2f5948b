"""Development mode, the image's CMD: JupyterLab and sshd, run and stopped together.

`docker run -p 8888:8888 -p 2222:22 IMAGE` lands here (docs/development.md).
Jupyter always has a token (given, or made here and printed with the URL); sshd takes public keys
only, from SSH_AUTHORIZED_KEYS and a mounted file, with host keys made at the container's first
start. Both may run as a user chosen at run time instead of root. PID 1 (byoc-init) forwards
SIGTERM here and to both services; the supervisor stops whatever is left after DEV_STOP_GRACE.

One job per module:
    settings   the DEV_*/JUPYTER_*/SSH_* variables -> DevConfig (DevError on a bad value)
    keys       authorized keys (from the variable, a mounted file, ~/.ssh) and the peers' key
    user       the account the services run as, and its access to the notebook directory
    files      what is written: sshd config, peers' client config, profile snippet, keys
    services   the supervisor of Jupyter and sshd: the first to end, or SIGTERM, ends both
    main       set-up in order, the messages, the exit code (`python -m byoc.dev`)
"""
