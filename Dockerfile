# syntax=docker/dockerfile:1
#
# One image for every txmq service, the CLI and the SDK; the command picks the service:
#
#   docker build -t txmq:0.1.0 .                                  # default target: runtime
#   docker run --rm txmq:0.1.0 store --help                       # = `txmq store --help`
#   docker build --target analytics -t txmq:0.1.0-analytics .     # + JRE and PySpark
#
# Why one image and how it is checked: docs/kubernetes.md. tests/helm/test_dockerfile.py
# parses this file (stages, user, entrypoint, what the runtime stages contain).
#
# Stages: deps (venv with txmq's dependencies) -> deps-analytics (+ the analytics extra's);
# build (deps + txmq) / build-analytics (deps-analytics + txmq); base (python + a user) ->
# analytics (+ JRE) / runtime (the default, last).
# The final stages copy the finished venv; they have no compiler, no build dependencies
# and no source tree.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- deps: a virtualenv at the path it will have at run time, with txmq's third-party ----
# dependencies only, read from the two pyproject files (the line below prints them for the
# extras it is given). Their own layers: a change to txmq's sources rebuilds only what
# comes after, not PySpark.
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# A C compiler for the SDK's native record codec (optional in setup.py: without one the
# install silently falls back to the pure-Python codec, several times slower per
# message). Python's headers too where the base image lacks them (Debian's python3).
RUN apt-get update \
    && pkgs="gcc libc6-dev" \
    && if [ ! -f "$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then pkgs="$pkgs python3-dev"; fi \
    && apt-get install -y --no-install-recommends $pkgs \
    && rm -rf /var/lib/apt/lists/*
# No pip or setuptools inside the venv: the image's own pip installs into it (--python).
RUN python -m venv --without-pip /opt/txmq
WORKDIR /src
COPY pyproject.toml ./
COPY clients/python/pyproject.toml clients/python/
RUN python -c "from tomllib import load; import sys; server, sdk = (load(open(f, 'rb'))['project'] for f in ('pyproject.toml', 'clients/python/pyproject.toml')); deps = [*server['dependencies'], *sdk['dependencies'], *(d for extra in sys.argv[1:] for d in server['optional-dependencies'][extra])]; print(chr(10).join(d for d in deps if not d.startswith('txmq')))" export > /tmp/deps.txt \
    && python -m pip --python /opt/txmq/bin/python install -r /tmp/deps.txt

# ---- deps-analytics: the same plus the analytics extra's dependencies (PySpark, ...) ------
FROM deps AS deps-analytics
RUN python -c "from tomllib import load; print(chr(10).join(load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['analytics']))" > /tmp/deps-analytics.txt \
    && python -m pip --python /opt/txmq/bin/python install -r /tmp/deps-analytics.txt

# ---- build: txmq itself ----------------------------------------------------------------
FROM deps AS build
# The SDK first (it carries the generated stubs, committed in clients/python/src/txmq/v1:
# nothing is generated here), then the services, the CLI and the analytics job.
COPY clients/python/ clients/python/
COPY services/ services/
COPY cli/ cli/
COPY analytics/ analytics/
# Regular (not editable) installs: the venv must not refer back to /src. The gateway's
# apache.rocketmq.v2 modules come from the pinned rocketmq-python-client (a dependency).
# The export extra (pyarrow) lets the stores write the Parquet exports the chart's
# analytics CronJob reads (with analytics.exports.source store).
RUN python -m pip --python /opt/txmq/bin/python install ./clients/python ".[export]" \
    && /opt/txmq/bin/python -c "import txmq.v1.store_pb2_grpc, txmq_store.__main__, txmq_pull.__main__, txmq_txcheck.__main__, txmq_gateway.__main__, txmq_gateway.service, txmq_cli.main, pyarrow.parquet; from txmq.codec_native import NATIVE; assert NATIVE, 'the native record codec was not built'"

# ---- build-analytics: the analytics venv plus txmq (the same sources as build) -----------
FROM deps-analytics AS build-analytics
COPY --from=build /src /src
RUN python -m pip --python /opt/txmq/bin/python install ./clients/python ".[analytics]" \
    && /opt/txmq/bin/python -c "import pyspark, txmq_analytics.job, txmq_store.__main__; from txmq.codec_native import NATIVE; assert NATIVE"

# ---- base: what both final images share -------------------------------------------------
FROM ${PYTHON_IMAGE} AS base
LABEL org.opencontainers.image.title="txmq" \
      org.opencontainers.image.description="txmq: a transactional message broker with RocketMQ semantics (store, pull, txcheck, RocketMQ 5 gateway, CLI, SDK)" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid/gid, so Kubernetes can check runAsNonRoot without runAsUser.
RUN groupadd --system --gid 10001 txmq \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/txmq --no-create-home \
       --shell /usr/sbin/nologin txmq \
    && mkdir -p /var/lib/txmq \
    && chown 10001:10001 /var/lib/txmq
# Nothing installs packages at run time: no pip, setuptools or wheel in the final images.
# A Python that marks itself externally managed (Debian's python3, PYTHON_IMAGE built from
# Debian packages) refuses `pip uninstall`: its package manager removes them instead.
RUN if ls /usr/lib/python3*/EXTERNALLY-MANAGED >/dev/null 2>&1; then \
        apt-get purge -y --auto-remove python3-pip python3-setuptools python3-wheel \
        && rm -rf /var/lib/apt/lists/*; \
    else \
        python -m pip uninstall --yes --quiet pip setuptools wheel; \
    fi
ENV PATH=/opt/txmq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /var/lib/txmq
# store 10911, pull 10912, txcheck 10913, gateway 8081 (the chart's and `txmq up`'s defaults)
EXPOSE 10911 10912 10913 8081

# ---- analytics: base + a JRE + the venv with PySpark (`txmq analytics run`) --------------
FROM base AS analytics
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build-analytics /opt/txmq /opt/txmq
USER 10001:10001
ENTRYPOINT ["txmq"]
CMD ["analytics", "--help"]

# ---- runtime (default): base + the venv; `txmq store|pull|txcheck|gateway|up|...` --------
FROM base AS runtime
COPY --from=build /opt/txmq /opt/txmq
USER 10001:10001
ENTRYPOINT ["txmq"]
CMD ["--help"]
