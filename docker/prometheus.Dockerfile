# Prometheus from Debian's package, for machines where prom/prometheus cannot be pulled
# (`make up-cpu` here).  Same contract as the official image: runs as nobody, data in
# /prometheus, config given on the command line, wget for the compose healthcheck.
ARG DEBIAN_IMAGE=sparkserve/debian:bookworm
FROM ${DEBIAN_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update -q \
    && apt-get install -y -q --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o 65534 -g 65534 -m 0755 /prometheus
USER 65534:65534
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
