# shellcheck shell=bash
# Sourced by every RUN that calls pip. Points pip at what the build was given, if anything:
# - the host's CA bundle as the BuildKit secret "ca" (a TLS-intercepting proxy); a secret mount
#   lives only for the RUN, so the bundle never lands in a layer;
# - a wheelhouse in the build context's .wheelhouse/ (flat *.whl files, or a simple index under
#   .wheelhouse/simple), looked at before PyPI.
if [ -s /run/secrets/ca ]; then
    export PIP_CERT=/run/secrets/ca
fi
if compgen -G "/wheelhouse/*.whl" >/dev/null; then
    export PIP_FIND_LINKS=/wheelhouse
fi
if [ -f /wheelhouse/simple/index.html ]; then
    export PIP_EXTRA_INDEX_URL=file:///wheelhouse/simple
fi
