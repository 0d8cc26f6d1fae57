# compaction-proxy. Build: docker build -t compaction-proxy .   Run: see docker-compose.yml.
# Pinned base: the same Python in both stages, so the venv copied across works unchanged.

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN python -m venv /opt/venv && /opt/venv/bin/pip install .
# tiktoken downloads its encodings on first use; fetch them now, at build time, so that a
# running container never needs the network for them.
ENV TIKTOKEN_CACHE_DIR=/opt/tiktoken
RUN /opt/venv/bin/python -c "import tiktoken; [tiktoken.get_encoding(n) for n in ('o200k_base', 'cl100k_base')]"

FROM python:3.11.13-slim-bookworm
RUN groupadd --system --gid 10001 proxy \
    && useradd --system --uid 10001 --gid proxy --home-dir /app --no-create-home proxy
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/tiktoken /opt/tiktoken
COPY config/proxy.yaml /app/config/proxy.yaml
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TIKTOKEN_CACHE_DIR=/opt/tiktoken \
    COMPACTION_PROXY_SERVER__HOST=0.0.0.0 \
    COMPACTION_PROXY_SERVER__PORT=8080
USER proxy
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['COMPACTION_PROXY_SERVER__PORT'], timeout=2)"
CMD ["compaction-proxy", "serve", "--config", "/app/config/proxy.yaml"]
