# syntax=docker/dockerfile:1
# One image for both commands (volcano-exporter, volcano-watchdog; volcano-sim too).
#   docker build -t volcano-monitor:0.1.0 .
#   docker run --rm volcano-monitor:0.1.0 volcano-watchdog --help
# The Helm chart (deploy/helm/volcano-monitor) runs it as uid/gid 10001 with a read-only root
# filesystem: keep APP_UID in step with podSecurityContext in the chart's values.yaml.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the project's wheel plus wheels of every dependency, so the runtime stage installs
# offline and carries no compiler, pip cache or source tree.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
# volcano_monitor/ is the import package; its entries are symlinks to the top-level folders.
COPY volcano_monitor ./volcano_monitor
COPY core ./core
COPY exporter ./exporter
COPY watchdog ./watchdog
COPY simulator ./simulator
COPY dashboards ./dashboards
RUN pip wheel --wheel-dir /wheels .

# ---- runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG APP_UID=10001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid "${APP_UID}" volcano \
 && useradd --system --uid "${APP_UID}" --gid "${APP_UID}" --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin volcano \
 && mkdir -p /var/lib/volcano-watchdog \
 && chown "${APP_UID}:${APP_UID}" /var/lib/volcano-watchdog
# Installed from the build stage's wheels only (--no-index): the image holds what was built, nothing
# fetched later. The bind mount keeps the wheels out of the image's layers.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels volcano-monitor \
 && volcano-exporter --help >/dev/null \
 && volcano-watchdog --help >/dev/null
# The watchdog's default database (sqlite:///volcano-watchdog.db) is relative: it lands here, which
# is also where the chart mounts the SQLite volume.
WORKDIR /var/lib/volcano-watchdog
USER ${APP_UID}:${APP_UID}
# 9746: exporter /metrics; 9747: watchdog API and /metrics.
EXPOSE 9746 9747
CMD ["volcano-exporter"]
