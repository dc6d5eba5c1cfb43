# Sourced by the GPU scripts: the Python to use, wheels carried in .whl/ (grad-cam and ttach,
# for the CAM baselines) installed into /tmp/site first, and src/ on PYTHONPATH.
PYTHON=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
