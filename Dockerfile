# Odradek broker image.
#   docker build -t odradek:dev .
#   docker run -p 127.0.0.1:9092:9092 odradek:dev   # clients on the host use localhost:9092 (no
#                                                   # authentication: -p 9092:9092 opens it to the network)
# Any property can be changed with ODRADEK_<KEY> environment variables (-e ODRADEK_NUM_PARTITIONS=3).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what the package needs (no tests, no local virtualenv), so the build context stays small.
COPY pyproject.toml README.md ./
COPY odradek/ odradek/
COPY protocol/ protocol/
COPY storage/ storage/
COPY purgatory/ purgatory/
COPY raft/ raft/
COPY metadata/ metadata/
COPY replication/ replication/
COPY coordinator/ coordinator/
COPY broker/ broker/
COPY client/ client/
COPY pipeline/ pipeline/
RUN pip install . && rm -rf /src

COPY configs/server.properties /etc/odradek/server.properties

RUN useradd --system --home-dir /var/lib/odradek --create-home odradek
USER odradek
WORKDIR /var/lib/odradek
# Inside a container the broker must bind every interface, and tell clients an address they can reach.
ENV ODRADEK_LOG_DIRS=/var/lib/odradek/data \
    ODRADEK_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    ODRADEK_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092

# The client listener. The Prometheus endpoint is off by default; with -e ODRADEK_METRICS_PORT=9404 publish
# it too (-p 127.0.0.1:9404:9404): it binds the first listener's host (0.0.0.0 here) unless metrics.host says.
EXPOSE 9092
CMD ["odradek", "broker", "start", "--config", "/etc/odradek/server.properties"]
