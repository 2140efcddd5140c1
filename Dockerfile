# vLLM simulator image: `docker run -p 8000:8000 IMAGE [MODEL] [--flag value ...]`, the arguments
# of `vllm serve` (the image's entrypoint is the simulator's command line).
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, in their own layer: rebuilt only when requirements.txt changes.
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY app.py wsgi.py ./
COPY server/ server/
COPY blueprints/ blueprints/
COPY schemas/ schemas/
COPY generation/ generation/
COPY data/ data/
COPY deploy/healthcheck.py deploy/
# The app's bytecode in the image (PYTHONDONTWRITEBYTECODE keeps the running container from
# writing it: without it every start compiles ~70 modules from source, ~0.3 s of CPU), and an
# unprivileged user; the simulator writes nothing but temporary files (self-signed certs) and,
# for a real model, its tokenizer in the Hugging Face cache.
# The user has a writable home: a model's tokenizer downloads into its Hugging Face cache.
RUN python -m compileall -q app.py wsgi.py server blueprints schemas generation data \
    && useradd --system --uid 10001 --create-home --home-dir /home/sim sim
ENV HOME=/home/sim \
    HF_HOME=/home/sim/.cache/huggingface
USER 10001

EXPOSE 8000
# SIGTERM drains (readiness 503, in-flight streams finish within --shutdown-timeout, default 30 s):
# give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
# /health on the port (and scheme) the simulator was started with: deploy/healthcheck.py reads
# the main process's --port/--host/--ssl-certfile, so `docker run IMAGE MODEL --port 9000` works.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "deploy/healthcheck.py"]

ENTRYPOINT ["python", "app.py"]
CMD ["--host", "0.0.0.0", "--port", "8000"]
