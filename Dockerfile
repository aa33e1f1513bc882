# Odradek broker image.
#   docker build -t odradek:dev .
#   docker run -p 9092:9092 odradek:dev          # clients on the host use localhost:9092
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

# Client listener and the (optional) Prometheus endpoint.
EXPOSE 9092 9404
CMD ["odradek", "broker", "start", "--config", "/etc/odradek/server.properties"]
