# The Debian + Python 3.11 base where debian:bookworm can be pulled (elsewhere
# tools/docker_bases.sh makes the same image with debootstrap).
FROM debian:bookworm
# hadolint ignore=DL3008
RUN apt-get update -q \
    && apt-get install -y -q --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
